"""A node volume out of inodes pauses sampling as "disk full", like one out of bytes, and asks the
remote for nothing while it lasts.

A volume of many small files (here a real tmpfs with ``nr_inodes``) can run out of inodes with
bytes to spare. The sampler measured bytes only, so it saw room, sent a GET for each try, found
the temp file refused, and tried again at once: a reviewer counted 4,510 GETs for 23 keys in 12 s,
with ``backpressure: no`` in the status. The remote here counts the bodies it is asked for.
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
from inprocess import objects_of, sampling, settings_for

from epochfs.sidecar.remote.testing import MemoryReader, MemoryRemote

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")


class CountingRemote(MemoryRemote):
    """Counts the bodies asked for; opens wait for ``gate`` (downloads held in flight while the
    volume's inodes are used up)."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        super().__init__(objects)
        self.gate = threading.Event()
        self.asked = 0
        self._asking = threading.Lock()

    def open(self, key: str, *, checksum: bool = False) -> MemoryReader:
        with self._asking:
            self.asked += 1
        assert self.gate.wait(30), "gate never opened"
        return super().open(key, checksum=checksum)


@contextmanager
def inode_volume(path: Path) -> Iterator[Path]:
    """A real tmpfs with room for bytes but a small inode table."""
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,nr_inodes=2000", "tmpfs", str(path)],
                   check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def use_every_inode(folder: Path) -> list[Path]:
    """Empty files in ``folder`` until the volume refuses one (ENOSPC: no inode left)."""
    folder.mkdir()
    made: list[Path] = []
    while True:
        path = folder / str(len(made))
        try:
            path.touch(exist_ok=False)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
            return made
        made.append(path)


def disk_full_gauge() -> float | None:
    from prometheus_client import REGISTRY

    return REGISTRY.get_sample_value("epochfs_disk_full")


def test_a_volume_out_of_inodes_pauses_as_disk_full_without_asking_the_remote(tmp_path: Path) -> None:
    objects = objects_of(40, 16 * 1024)
    remote = CountingRemote(objects)
    with inode_volume(tmp_path / "vol") as vol:
        cache = vol / "cache"
        settings = settings_for(cache, "--capacity", "6Mi", "--concurrency", "4")
        with sampling(cache, remote, settings) as (store, sampler):
            wait_until(lambda: remote.asked >= 4, what="downloads in flight")
            fillers = use_every_inode(vol / "filler")
            assert os.statvfs(vol).f_favail == 0
            remote.gate.set()
            wait_until(lambda: store.stats().backpressure_reason == "disk full", timeout=20,
                       what="disk full in the status while no inode is free")
            assert sampler.disk.limited
            assert disk_full_gauge() in (None, 1.0), "the epochfs_disk_full gauge says so"
            # The downloads held at the gate, and at most one more per slot that found the
            # volume full: no request per retry.
            asked = remote.asked
            assert asked <= 8, f"{asked} bodies asked for on a volume that can take no file"
            assert store.stats().skipped_total == 0, "keys are kept, not skipped"
            for path in fillers:
                path.unlink()
            wait_until(lambda: store.stats().samples == 40, timeout=30,
                       what="every object once inodes are free again")
            assert store.stats().backpressure_reason is None
            assert store.stats().skipped_total == 0
            assert remote.asked <= 40 + 8, f"{remote.asked} bodies asked for 40 objects"
        assert not list((cache / "tmp").iterdir())


def test_the_docs_give_the_inode_margin() -> None:
    from common import ROOT

    from epochfs.sidecar.sampler.diskspace import INODE_MARGIN

    for doc in ("sampler.md", "reliability.md"):
        text = " ".join((ROOT / "docs" / doc).read_text().split())
        assert f"fewer than {INODE_MARGIN} free" in text, doc
