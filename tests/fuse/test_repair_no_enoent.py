"""A repair never makes a listed file vanish (issue 20, "Repairs keep epochs whole").

A sample whose object file fails a check (the background scrub, ``epochfs verify``) is fetched
again into its place. Before, the take-out removed (or moved to ``quarantine/``) the object file
at once, and the download came seconds later: for that whole download an open of the entry in
``epoch-N/`` answered ENOENT, through the FUSE mount and the folder view alike, though the epoch
still listed it.

Here the window is held open on purpose: the remote blocks the repair's download (its second
open of the key) until the test has looked. While it is blocked, through a real FUSE mount (and
the published folder), the epoch lists every file, the damaged entry exists and opens, and reads
the old bytes; once the download is let through the same entry reads the right bytes. The old
file is replaced by the repair with one rename, so there is no moment between the two."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import files_under, mounted
from integrity_helpers import damage, objects_of, sampling
from store_helpers import sid_of

from epochfs.sidecar.remote.testing import MemoryReader, MemoryRemote
from epochfs.sidecar.store import Store, object_name

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))


class HeldRepairs(MemoryRemote):
    """A remote that holds the *second* open of ``held`` (the repair's download; the first was
    the sample's admission) until :attr:`release` is set, and says so in :attr:`entered`: the
    take-out has happened and the repair has not landed, for as long as the test needs."""

    def __init__(self, objects: dict[str, bytes], held: str) -> None:
        super().__init__(objects)
        self.held = held
        self.entered = threading.Event()
        self.release = threading.Event()

    def open(self, key: str, *, checksum: bool = False) -> MemoryReader:
        if key == self.held and self.opens.get(key, 0) >= 1:
            self.entered.set()
            self.release.wait(120)
        return super().open(key, checksum=checksum)


@contextmanager
def held(remote: HeldRepairs) -> Iterator[None]:
    """Let the held download through on the way out, whatever happened (the sampler stops)."""
    try:
        yield
    finally:
        remote.release.set()


def _names(root: Path) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files}


def _during_the_repair(epoch: Path, objects: dict[str, bytes], key: str, old: bytes) -> None:
    """What a reader of ``epoch`` sees while ``key``'s repair is in flight: every file listed,
    the entry there and readable (never ENOENT), with the old bytes or the right ones."""
    assert _names(epoch) == set(objects), "the epoch lost entries during the repair"
    entry = epoch / key
    try:
        got = entry.read_bytes()
    except FileNotFoundError as e:
        raise AssertionError(f"{entry} answered ENOENT while its sample was repaired") from e
    assert got in (old, objects[key]), "neither the old bytes nor the right ones"
    assert os.stat(entry).st_size == len(objects[key])


def test_a_scrub_repair_never_answers_enoent_through_the_mount(tmp_path: Path) -> None:
    objects = objects_of(30)
    key = sorted(objects)[7]
    remote = HeldRepairs(objects, key)
    cache = tmp_path / "cache"
    with sampling(cache, remote, "--scrub-rate", "50M", "--min-samples", "30") as (store, _), held(remote):
        wait_until(lambda: store.stats().samples == 30, what="every object admitted")
        assert store.cut(0) == 0
        with mounted(cache, tmp_path / "mnt") as m:
            epoch = m.path / "epoch-0"
            assert files_under(epoch) == objects  # the kernel now caches every entry and link
            path = cache / "objects" / object_name(sid_of(key))
            damage(path, "flip")
            old = path.read_bytes()
            assert remote.entered.wait(60), "the scrub found the damage and the repair started"
            assert store.stats().repairing == 1
            for _ in range(3):  # a fresh open each time, the kernel's cached link followed
                _during_the_repair(epoch, objects, key, old)
            remote.release.set()
            wait_until(lambda: store.stats().repaired_total == 1, timeout=60, what="the repair landed")
            assert files_under(epoch) == objects, "every file reads its right bytes"
            assert "Traceback" not in m.log_text()


def test_a_verify_quarantine_never_answers_enoent_in_either_view(tmp_path: Path) -> None:
    """``epochfs verify`` quarantines a damaged object beside the running sampler: through the
    FUSE mount and through the folder view's published folder, the entry is there and reads
    until the repair replaces it; ``quarantine/`` keeps the damaged copy."""
    from epochfs.sidecar.folderview import FolderPublisher

    objects = objects_of(30)
    key = sorted(objects)[3]
    remote = HeldRepairs(objects, key)
    cache, folder = tmp_path / "cache", tmp_path / "view"
    with sampling(cache, remote, "--scrub-rate", "0", "--min-samples", "30") as (store, _), held(remote):
        wait_until(lambda: store.stats().samples == 30, what="every object admitted")
        assert store.cut(0) == 0
        publisher = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir.absolute())
        publisher.recover()
        publisher.step(force_status=True)
        with mounted(cache, tmp_path / "mnt") as m:
            views = [m.path / "epoch-0", folder / "epoch-0"]
            for epoch in views:
                assert files_under(epoch) == objects
            path = cache / "objects" / object_name(sid_of(key))
            damage(path, "flip")
            old = path.read_bytes()
            verify = subprocess.run([EPOCHFS, "verify", "--cache", str(cache)], capture_output=True,
                                    text=True, timeout=120)
            assert verify.returncode == 1 and "1 damaged" in verify.stdout, verify.stdout + verify.stderr
            # verify has exited: its take-out (and quarantine) is complete; the sampler's repair
            # (it looks for verify's every few seconds) is held at the remote
            assert remote.entered.wait(60), "the sampler started the repair"
            assert (cache / "quarantine" / sid_of(key)).read_bytes() == old, "the damaged copy kept"
            publisher.step()
            for epoch in views:
                _during_the_repair(epoch, objects, key, old)
            remote.release.set()
            wait_until(lambda: store.stats().repaired_total == 1, timeout=60, what="the repair landed")
            publisher.step()
            for epoch in views:
                assert files_under(epoch) == objects, f"{epoch}: every file reads its right bytes"


def test_the_repaired_file_replaces_the_old_one_in_one_rename(tmp_path: Path) -> None:
    """Below the mount: from the take-out to the repair the object file is always there (the old
    inode, then the new one); it never goes missing, so no view can answer ENOENT."""
    objects = objects_of(12)
    key = sorted(objects)[5]
    remote = HeldRepairs(objects, key)
    cache = tmp_path / "cache"
    with sampling(cache, remote, "--scrub-rate", "50M", "--min-samples", "12") as (store, _), held(remote):
        wait_until(lambda: store.stats().samples == 12, what="every object admitted")
        path = cache / "objects" / object_name(sid_of(key))
        damage(path, "flip")
        inode = path.stat().st_ino
        assert remote.entered.wait(60)
        assert path.exists(), "the take-out removed the object file before its repair"
        assert path.stat().st_ino == inode
        remote.release.set()
        wait_until(lambda: store.stats().repaired_total == 1, timeout=60, what="the repair landed")
        assert path.read_bytes() == objects[key] and path.stat().st_ino != inode
    with Store(cache) as s:
        assert s.stats().repairing == 0
