"""An admission whose install fails part way leaves no object file behind.

The batch's files are renamed into ``objects/`` one by one before the index commit. When one
rename's folder cannot be made (ENOSPC: the volume is out of inodes, the situation where room
matters most), the objects already renamed have no index row and no byte count: they are given
back at once, as after a failed commit, rather than left as orphans until the next start.
"""

from __future__ import annotations

import errno
import hashlib
from pathlib import Path

import pytest
from inprocess import small_volume
from store_helpers import sid_of

from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.store import Admission, Policy, Store


def test_a_failed_install_gives_back_the_objects_it_renamed(tmp_path: Path) -> None:
    with (
        small_volume(tmp_path / "vol", "16m,nr_inodes=400") as vol,
        Store(vol / "cache", create=True) as store,
    ):
        store.configure(Policy(capacity=1 << 20, keep_epochs=2, headroom=0.0))
        first = "a0"  # its fan-out folder exists; the second key's does not, and cannot be made
        (store.objects_dir / sid_of(first)[:2]).mkdir(exist_ok=True)
        second = next(
            k
            for k in (f"b{i}" for i in range(1000))
            if sid_of(k)[:2] != sid_of(first)[:2] and not (store.objects_dir / sid_of(k)[:2]).exists()
        )
        reservations = Reservations(store)
        items = []
        for key in (first, second):
            assert reservations.reserve(1000)
            body = key.encode() * 500
            temp = store.temp_path()
            temp.write_bytes(body)
            items.append(
                Admission(key, sid_of(key), len(body), "md5:" + hashlib.md5(body).hexdigest(), "v1", temp)
            )
        n = 0
        while True:  # use up the volume's inodes
            try:
                (vol / f"f{n}").touch()
            except OSError as e:
                assert e.errno == errno.ENOSPC
                break
            n += 1
        with pytest.raises(OSError) as failed:
            reservations.admit(items)
        assert failed.value.errno == errno.ENOSPC
        assert [p.name for p in store.objects_dir.rglob("*") if p.is_file()] == []
        assert store.stats().samples == 0 and store.cache_bytes() == 0
