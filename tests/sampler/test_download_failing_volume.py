"""A download on a node volume that fails is a local failure, never a remote one.

- A volume that can take no file (no free inode) refuses the temp file before the remote is asked
  for the body: each retry used to cost a GET (thousands a minute on a volume out of inodes).
- A volume that turns read-only mid-download (ext4 ``errors=remount-ro`` after an I/O error) makes
  the write fail, and then the removal of the temp file too: that second error used to replace
  the :class:`LocalWriteError`, read as the remote's failure, and the key was skipped for good.

Real filesystems: a tmpfs with a small inode table, and an ext4 image on a loop device whose
error is triggered through ``/sys/fs/ext4/<dev>/trigger_fs_error``.
"""

from __future__ import annotations

import errno
import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from common import wait_until
from store_helpers import sid_of

from epochfs.sidecar.download import Downloader, FetchResult, LocalWriteError, RetryPolicy
from epochfs.sidecar.remote.testing import MemoryReader, MemoryRemote
from epochfs.sidecar.store import Candidate, Store

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts filesystems")

KEY = "train/0000.bin"


class GatedRemote(MemoryRemote):
    """Counts the bodies asked for; each open waits for ``gate``, and a body's reads after its
    first ``served`` bytes wait for ``rest`` (a download held with part of its body written)."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        super().__init__(objects)
        self.gate = threading.Event()
        self.rest = threading.Event()
        self.rest.set()
        self.asked = 0
        self.served = 0

    def open(self, key: str, *, checksum: bool = False) -> MemoryReader:
        self.asked += 1
        assert self.gate.wait(30), "gate never opened"
        reader = super().open(key, checksum=checksum)
        readinto = reader.readinto

        def held(buf: memoryview) -> int:
            if self.served:
                assert self.rest.wait(30), "rest never released"
            n = readinto(buf)
            self.served += n
            return n

        reader.readinto = held  # type: ignore[method-assign]
        return reader


@contextmanager
def mounted(path: Path, *args: str) -> Iterator[Path]:
    path.mkdir()
    subprocess.run(["mount", *args, str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def candidate(remote: MemoryRemote) -> Candidate:
    listed = {str(o.key): o for o in remote.list()}[KEY]
    return Candidate(KEY, sid_of(KEY), listed.size, listed.version)


def downloader(store: Store, remote: MemoryRemote) -> Downloader:
    return Downloader(store=store, remote=remote, stop=threading.Event(),
                      retry=RetryPolicy(attempts=3, base=0.0, cap=0.0))


def test_a_volume_without_a_free_inode_refuses_the_download_before_the_remote_is_asked(
        tmp_path: Path) -> None:
    remote = GatedRemote({KEY: b"x" * 65536})
    remote.gate.set()
    with mounted(tmp_path / "vol", "-t", "tmpfs", "-o", "size=16m,nr_inodes=200", "tmpfs") as vol:
        store = Store(vol / "cache", create=True)
        try:
            filler = vol / "filler"
            filler.mkdir()
            n = 0
            while True:
                try:
                    (filler / str(n)).touch(exist_ok=False)
                except OSError as e:
                    assert e.errno == errno.ENOSPC
                    break
                n += 1
            with pytest.raises(LocalWriteError) as raised:
                downloader(store, remote).fetch(candidate(remote))
            assert "No space left" in str(raised.value)
            assert remote.asked == 0, "no request for a body the volume cannot take"
        finally:
            store.close()


def test_a_volume_gone_read_only_mid_download_is_a_local_failure_not_a_skipped_key(
        tmp_path: Path) -> None:
    image = tmp_path / "ext4.img"
    with open(image, "wb") as f:
        f.truncate(64 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    remote = GatedRemote({KEY: os.urandom(4 << 20)})
    with mounted(tmp_path / "vol", "-o", "loop,errors=remount-ro", str(image)) as vol:
        device = subprocess.run(["findmnt", "-no", "SOURCE", str(vol)], check=True,
                                capture_output=True, text=True).stdout.strip()
        trigger = Path("/sys/fs/ext4") / Path(device).name / "trigger_fs_error"
        if not trigger.exists():
            pytest.skip("this kernel has no ext4 trigger_fs_error")
        store = Store(vol / "cache", create=True)
        try:
            dl = downloader(store, remote)
            results: list[FetchResult | BaseException] = []

            def fetch() -> None:
                try:
                    results.append(dl.fetch(candidate(remote)))
                except BaseException as e:
                    results.append(e)

            remote.rest.clear()
            remote.gate.set()
            worker = threading.Thread(target=fetch)
            worker.start()
            temps = vol / "cache" / "tmp"
            wait_until(lambda: remote.served > 0 and any(temps.iterdir()),
                       what="the download in flight, its temp file made")
            trigger.write_text("1\n")
            wait_until(lambda: _refuses_files(vol), what="the volume refusing writes")
            remote.rest.set()
            worker.join(timeout=30)
            assert not worker.is_alive()
            assert len(results) == 1
            got = results[0]
            assert isinstance(got, LocalWriteError), f"a local failure, not a remote one: {got!r}"
            assert remote.asked == 1, "not retried as a remote failure"
        finally:
            store.close()


def _refuses_files(vol: Path) -> bool:
    """Whether the volume refuses a new file now (read-only after the error)."""
    try:
        (vol / "probe").touch()
    except OSError as e:
        return e.errno in (errno.EROFS, errno.EIO)
    (vol / "probe").unlink()
    return False
