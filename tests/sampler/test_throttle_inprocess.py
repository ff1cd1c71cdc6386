"""The sampler under throttling, in-process over the in-memory remote: a store that answers
``503 SlowDown`` to every GET for a while loses no key. Nothing is skipped, every key is fetched
in the end, and the fetch window shrinks while the store throttles, then grows back to
``--concurrency``.

The throttled answer is typed as S3's presigned fast path types it (``fast_path_failure`` over
the 503 error document), so the test runs the same against a sampler that knew throttling only as
an outage: that one skipped the objects it gave up on before its breaker opened."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from common import wait_until
from inprocess import objects_of, sampling, settings_for
from prometheus_client import REGISTRY

from epochfs.sidecar.remote.errors import fast_path_failure
from epochfs.sidecar.remote.httpget import HTTPStatusError
from epochfs.sidecar.remote.testing import MemoryReader, MemoryRemote

SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
            b"<Message>Please reduce your request rate.</Message></Error>")


class ThrottlingRemote(MemoryRemote):
    """A :class:`MemoryRemote` that answers every GET with S3's 503 SlowDown while ``throttling``
    is set, counting those answers."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        super().__init__(objects)
        self.throttling = threading.Event()
        self.slowdowns = 0

    def open(self, key: str, *, checksum: bool = False) -> MemoryReader:
        if self.throttling.is_set():
            with self._lock:
                self.opens[key] = self.opens.get(key, 0) + 1
                self.slowdowns += 1
            failure = fast_path_failure(HTTPStatusError(503, "Slow Down", SLOWDOWN), key=key)
            assert failure is not None
            raise failure
        return super().open(key, checksum=checksum)


def throttled_total() -> float:
    return REGISTRY.get_sample_value("epochfs_remote_throttled_requests_total") or 0.0


def test_a_store_that_throttles_for_a_while_loses_no_key(tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    objects = objects_of(120)
    remote = ThrottlingRemote(objects)
    remote.throttling.set()
    before = throttled_total()
    settings = settings_for(tmp_path / "cache", "--concurrency", "8", "--retries", "2")
    caplog.set_level(logging.INFO, logger="epochfs.sampler")
    with sampling(tmp_path / "cache", remote, settings) as (store, sampler):
        # More throttled answers on some objects than --retries allows.
        wait_until(lambda: max(remote.opens.values(), default=0) >= 4, timeout=30,
                   what="a while of SlowDown answers")
        wait_until(lambda: sampler.window.size == 1, timeout=10, what="the fetch window down to one")
        assert store.stats().skipped_total == 0 and store.stats().samples == 0
        remote.throttling.clear()
        wait_until(lambda: store.stats().samples == len(objects), timeout=60,
                   what="every object fetched after the throttling")
        wait_until(lambda: sampler.window.size == 8, timeout=10, what="the window back to --concurrency")
        assert store.stats().skipped_total == 0
    assert set(remote.opens) == set(objects)
    assert sum(remote.opens.values()) == len(objects) + remote.slowdowns  # one success per key
    assert throttled_total() - before == remote.slowdowns
    shrank = [r.getMessage() for r in caplog.records if "fetch window" in r.getMessage()]
    assert shrank and "SlowDown" in shrank[0] and "of 8" in shrank[0]
