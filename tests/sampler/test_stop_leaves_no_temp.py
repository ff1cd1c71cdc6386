"""A download that finished streaming but has not returned when the stop's grace ends leaves no
temp file.

On a stop the loop admits what finishes within STOP_GRACE, then removes the temps the downloader
still lists. A download whose body is written but whose worker is still busy (closing the reader,
a HEAD in the verification, a slow fsync) used to be no longer listed once streaming ended, and
its result, put after the loop stopped reading, was never taken: the temp stayed in ``tmp/`` until
the next start. Here the reader's close blocks until the sampler has returned.
"""

from __future__ import annotations

import threading
from pathlib import Path

from inprocess import sampling, settings_for

from epochfs.sidecar.remote.testing import MemoryReader, MemoryRemote


class _HeldClose(MemoryReader):
    """A reader whose close waits for the test (an HTTP body drained on close behaves so)."""

    closing = threading.Event()
    release = threading.Event()

    def close(self) -> None:
        type(self).closing.set()
        assert type(self).release.wait(60)
        super().close()


class _Remote(MemoryRemote):
    def open(self, key: str, *, checksum: bool = False) -> MemoryReader:
        plain = super().open(key, checksum=checksum)
        assert isinstance(plain, MemoryReader)
        return _HeldClose(bytes(plain._body), plain.etag or "")


def test_a_download_still_closing_after_the_stop_grace_leaves_no_temp(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    remote = _Remote({"train/0000.bin": b"x" * 4096})
    workers: list[threading.Thread] = []
    try:
        with sampling(cache, remote, settings_for(cache, "--concurrency", "1")) as (_, sampler):
            assert _HeldClose.closing.wait(60)  # the body is in its temp file
            assert [p.suffix for p in (cache / "tmp").iterdir()] == [".part"]
            workers = list(sampler._threads)
            sampler.stop.set()
        # the sampler's run has returned (past the grace); now the download returns, unread
    finally:
        _HeldClose.release.set()
    for t in workers:
        t.join(timeout=60)
        assert not t.is_alive()
    assert sorted(p.name for p in (cache / "tmp").iterdir()) == []
