"""A large object's download shows its progress before it lands: the bytes the downloads in flight
have received are published (``inflight_downloaded_bytes``, ``epochfs_inflight_downloaded_bytes``)
and ``epochfs status`` counts them in its cache line, its fetch rate and epoch 0's estimate. Counted
only at admission, a 1 GiB shard read "0 B/s", "0 B" and "0/1 samples" for its whole download."""

from __future__ import annotations

import threading
from pathlib import Path

from common import wait_until
from inprocess import sampling, settings_for
from prometheus_client import REGISTRY

from epochfs.sidecar.remote.testing import MemoryReader, MemoryRemote
from epochfs.sidecar.status import first_epoch_line, render
from epochfs.sidecar.status_lines import rates

MiB = 1 << 20
SIZE = 4 * MiB
HALF = 2 * MiB


class _Halfway(MemoryReader):
    """A body that stops after its first half until the test lets the rest come (a slow remote)."""

    reached = threading.Event()
    release = threading.Event()

    def read(self, n: int) -> bytes:
        if self._pos >= HALF:
            type(self).reached.set()
            assert type(self).release.wait(60)
        return super().read(min(n, HALF - self._pos) if self._pos < HALF else n)


class _Remote(MemoryRemote):
    def open(self, key: str, *, checksum: bool = False) -> MemoryReader:
        plain = super().open(key, checksum=checksum)
        assert isinstance(plain, MemoryReader)
        return _Halfway(bytes(plain._body), plain.etag or "")


def test_a_download_in_progress_is_counted_published_and_shown(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    remote = _Remote({"train/big.bin": bytes(range(256)) * (SIZE // 256)})
    settings = settings_for(cache, "--concurrency", "1", "--capacity", "16Mi")
    try:
        with sampling(cache, remote, settings) as (store, sampler):
            assert _Halfway.reached.wait(60)
            assert sampler.downloader.received.total() == HALF
            wait_until(lambda: store.stats().inflight_downloaded_bytes == HALF, timeout=20,
                       what="the bytes received published")
            doc = store.stats().to_json()
            assert REGISTRY.get_sample_value("epochfs_inflight_downloaded_bytes") == HALF
            assert "0 B / 16.0 MiB (0.0%), 2.0 MiB of 4.0 MiB in flight downloaded" in render(doc)
            before = {**doc, "fetched_bytes_total": 0, "inflight_downloaded_bytes": 0}
            got = rates(before, doc, 1.0)
            assert got["fetch MB/s"] == HALF / 1e6 and got["fetch samples/s"] == 0
            line = first_epoch_line(doc, got)
            assert line is not None and line.endswith(
                "0/1 samples cached (0%), downloading at 2.0 MiB/s: 2.0 MiB of 4.0 MiB in flight received, "
                "~1 s left for those"), line
            _Halfway.release.set()
            wait_until(lambda: store.stats().samples == 1, timeout=30, what="the object admitted")
            assert sampler.downloader.received.total() == 0
            wait_until(lambda: store.stats().inflight_downloaded_bytes == 0, timeout=20,
                       what="nothing received in flight once it landed")
            assert "in flight" not in render(store.stats().to_json()).splitlines()[0]
    finally:
        _Halfway.release.set()
