"""Taking the publisher lock on a full cache volume: the lock is the ``flock``, the pid in the file
is best effort, so a volume with no byte left does not stop a publisher from taking it, no
descriptor is left open by a failure, and a volume with no inode left (the lock file cannot be made)
is reported as the cache's volume being full, not the folder view's; the next try takes it.

Real full volumes: tmpfs mounts filled to ``ENOSPC``. Before the fix :func:`publisherlock.hold`
raised ``ENOSPC`` from the pid's write with the locked descriptor left open, the publisher said
"the folder view's volume is full", and its next try found its own leaked lock ("another
publisher (pid ?) holds ...").
"""

from __future__ import annotations

import errno
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import admit, make_objects, open_store

from epochfs.sidecar import folderview
from epochfs.sidecar.folderview import FolderPublisher
from epochfs.sidecar.store import Meta, Store, publisherlock

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (root)")


@pytest.fixture
def full_bytes(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs with inodes left and not one byte."""
    vol = tmp_path / "bytes"
    vol.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(vol)], check=True)
    try:
        with open(vol / "filler", "wb", buffering=0) as f, pytest.raises(OSError) as e:
            while True:
                f.write(b"x" * 4096)
        assert e.value.errno == errno.ENOSPC
        yield vol
    finally:
        subprocess.run(["umount", "-l", str(vol)], check=False)


@pytest.fixture
def full_inodes(tmp_path: Path) -> Iterator[tuple[Path, list[Path]]]:
    """A tmpfs with no inode left, and the files that filled it."""
    vol = tmp_path / "inodes"
    vol.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,nr_inodes=64", "tmpfs", str(vol)], check=True)
    try:
        made: list[Path] = []
        for i in range(1000):
            try:
                (vol / f"filler-{i}").touch()
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                break
            made.append(vol / f"filler-{i}")
        yield vol, made
    finally:
        subprocess.run(["umount", "-l", str(vol)], check=False)


def _lock_fds(vol: Path) -> list[str]:
    """This process's descriptors open on the volume's lock file."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target == str(vol / publisherlock.LOCK_NAME):
            found.append(fd)
    return found


def test_a_cache_volume_without_a_byte_left_still_gives_the_lock(full_bytes: Path) -> None:
    fd = publisherlock.hold(full_bytes)
    assert fd is not None
    try:
        assert publisherlock.state(full_bytes) is True
        assert _lock_fds(full_bytes) == [str(fd)]
    finally:
        os.close(fd)
    assert publisherlock.state(full_bytes) is False
    assert _lock_fds(full_bytes) == []
    again = publisherlock.hold(full_bytes)  # nothing of the first left to hold it
    assert again is not None
    os.close(again)


def test_a_cache_volume_without_an_inode_left_is_named_and_the_next_try_takes_the_lock(
        tmp_path: Path, full_inodes: tuple[Path, list[Path]]) -> None:
    vol, fillers = full_inodes
    store = open_store(tmp_path / "cache")
    admit(store, make_objects(3, 10))
    store.cut(0)
    store.close()
    folder = tmp_path / "view"
    stop = threading.Event()
    lock: list[int | None] = []
    failed: list[BaseException] = []

    def publish() -> None:
        try:
            with Store(tmp_path / "cache") as own:
                publisher = FolderPublisher(store=own, folder=folder, link_root=own.objects_dir, grace=False)
                try:
                    folderview._publish_until(stop, publisher, interval=0.02,
                                              on_recovered=lambda: lock.append(publisherlock.hold(vol)))
                finally:
                    publisher.close()
        except BaseException as e:  # shown by the assertions below
            failed.append(e)

    thread = threading.Thread(target=publish)
    thread.start()
    reader = Store(tmp_path / "cache")
    try:
        wait_until(lambda: failed or reader.meta(Meta.PUBLISH_PAUSED) is not None, timeout=30,
                   what="the pause reason")
        assert not failed, failed
        reason = reader.meta(Meta.PUBLISH_PAUSED) or ""
        assert reason.startswith("the cache volume is full"), reason
        assert _lock_fds(vol) == []
        fillers[-1].unlink()  # room for the lock file
        wait_until(lambda: failed or (lock and reader.meta(Meta.PUBLISH_PAUSED) is None), timeout=30,
                   what="the lock taken and the pause cleared")
        assert not failed, failed
        assert len(lock) == 1 and lock[0] is not None, lock
        assert publisherlock.state(vol) is True
        assert _lock_fds(vol) == [str(lock[0])]
    finally:
        stop.set()
        thread.join(timeout=60)
        reader.close()
        for fd in lock:
            if fd is not None:
                os.close(fd)
    assert not thread.is_alive() and not failed, failed
