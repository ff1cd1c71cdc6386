"""Reservations while an admission waits for the index: the fetch loop's next reservation does not
wait behind it (the listers' page commits made it wait, docs/listing.md), and the bytes being
admitted still count against the capacity, so the capacity rule holds throughout."""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest
from store_helpers import sid_of

from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.store import Admission, Policy, Store


def _download(store: Store, key: str, size: int) -> Admission:
    body = b"x" * size
    temp = store.temp_path()
    with open(temp, "wb") as f:
        f.write(body)
    return Admission(key, sid_of(key), size, "md5:" + hashlib.md5(body).hexdigest(), "v1", temp)


def test_a_reservation_does_not_wait_for_an_admission_waiting_for_the_index(tmp_path: Path) -> None:
    store = Store(tmp_path / "cache", create=True)
    store.configure(Policy(capacity=1000, keep_epochs=2, headroom=0.0))
    other = Store(tmp_path / "cache")  # another connection, as the listers have
    reservations = Reservations(store)
    assert reservations.reserve(400)
    item = _download(store, "a", 400)
    admitted = threading.Event()
    errors: list[BaseException] = []

    def admit() -> None:
        try:
            reservations.admit([item])
            admitted.set()
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    with other._ix.write():  # a commit held open: the admission waits for the index
        admitter = threading.Thread(target=admit, daemon=True)
        admitter.start()
        assert not admitted.wait(0.3)
        # The fetch loop reserves meanwhile, at once; the 400 bytes being admitted still count
        # (one byte more would need an eviction, a write that waits for the commit like any).
        assert reservations.reserve(600)
        assert reservations.reserved == 1000
    admitter.join(timeout=30)
    assert admitted.is_set() and not errors
    assert store.cache_bytes() == 400 and reservations.reserved == 600
    assert not reservations.reserve(1)  # nothing evictable: 400 cached + 600 reserved
    reservations.release(600)
    assert reservations.reserve(600) and not reservations.reserve(1)
    other.close()
    store.close()


def test_a_failed_admission_gives_its_bytes_back_as_reservations(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store(tmp_path / "cache", create=True)
    store.configure(Policy(capacity=1000, keep_epochs=2, headroom=0.0))
    reservations = Reservations(store)
    assert reservations.reserve(700)
    item = _download(store, "a", 700)

    def full(*_args: object, **_kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store, "admit", full)
    with pytest.raises(OSError):
        reservations.admit([item])
    assert reservations.reserved == 700  # reserved again: the caller releases it
    reservations.release(700)
    assert reservations.reserved == 0 and reservations.reserve(1000)
    os.unlink(item.temp)
    store.close()
