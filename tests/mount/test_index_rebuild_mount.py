"""A damaged index under a real FUSE mount keeps the epoch being read (issue 20, item 4).

Measured on the code before: 7 garbled pages of ``index.sqlite`` under a running sidecar, and the
mount was empty for over 50 s, a reader inside ``epoch-2`` got 13,706 ENOENT, and the whole cache
was deleted and fetched again. Here a reader keeps reading every file of ``epoch-1`` through the
mount while the sampler stops, 7 pages of the index are garbled, the next start finds the damage
and replaces the index, and the sampler runs again: the epoch lists every file at every look,
every read is the right bytes (a retriable error would be allowed, wrong bytes never), and nothing
of the epochs is fetched again."""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from collections import Counter
from pathlib import Path

from common import wait_until
from fuse_helpers import files_under, mounted
from integrity_helpers import objects_of, sampling
from store_helpers import garble

from epochfs.sidecar.folderview import FolderPublisher
from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.store import Store
from epochfs.sidecar.store.memberfiles import path_of


class Reader:
    """Reads every file of one epoch through the mount, over and over, on a thread."""

    def __init__(self, epoch: Path, objects: dict[str, bytes]) -> None:
        self.epoch = epoch
        self.objects = objects
        self.outcomes: Counter[str] = Counter()
        self.wrong: list[str] = []
        self.listings: list[int] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="reader", daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                names = {os.path.relpath(os.path.join(d, f), self.epoch)
                         for d, _, files in os.walk(self.epoch) for f in files}
            except OSError as e:
                self.outcomes[f"listing {errno.errorcode.get(e.errno or 0, e.errno)}"] += 1
                names = set()
            self.listings.append(len(names))
            for key in sorted(self.objects):
                try:
                    data = (self.epoch / key).read_bytes()
                except OSError as e:
                    self.outcomes[errno.errorcode.get(e.errno or 0, str(e.errno))] += 1
                    continue
                if data == self.objects[key]:
                    self.outcomes["ok"] += 1
                else:
                    self.wrong.append(key)

    def __enter__(self) -> Reader:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=60)



ARGS = ("--keep-epochs", "3", "--scrub-rate", "0")


def cut_two_epochs(cache: Path, remote: MemoryRemote, count: int) -> None:
    """Epoch 0 of half the ``count`` objects, epoch 1 of all of them, and both members files written
    by the sampler's keeper."""
    with sampling(cache, remote, *ARGS) as (store, _):
        wait_until(lambda: store.stats().samples >= count // 2, what=f"{count // 2} samples")
        assert store.cut(force=True) == 0
        wait_until(lambda: store.stats().samples == count, what="every object admitted")
        assert store.cut(force=True) == 1
        wait_until(lambda: path_of(cache, 0).exists() and path_of(cache, 1).exists(), timeout=10,
                   what="the sampler's keeper wrote both members files")

def test_a_reader_inside_an_epoch_reads_through_an_index_reset(tmp_path: Path) -> None:
    objects = objects_of(300, size=1000)
    remote = MemoryRemote(objects)
    cache = tmp_path / "cache"
    cut_two_epochs(cache, remote, 300)
    opened = sum(remote.opens.values())
    assert opened == 300
    with mounted(cache, tmp_path / "mnt") as m:
        epoch = m.path / "epoch-1"
        wait_until(lambda: len(os.listdir(epoch)) > 0, what="epoch-1 through the mount")
        with Reader(epoch, objects) as reader:
            wait_until(lambda: reader.outcomes["ok"] >= 300, what="one full pass before the damage")
            garble(cache, "samples")
            passes = len(reader.listings)
            wait_until(lambda: len(reader.listings) >= passes + 2, what="two passes over the damaged index")
            # The next start of the sampler: the full check finds the damage, the index is replaced.
            started = time.monotonic()
            with Store(cache, create=True) as fresh:
                assert fresh.check_index() != "ok"
                back = time.monotonic() - started
                fresh.recover(integrity="ok")
            with sampling(cache, remote, *ARGS) as (store, _):
                wait_until(lambda: "(index replaced); reopened" in m.log_text(), timeout=30,
                           what="the FUSE server follows the replaced index")
                passes = len(reader.listings)
                wait_until(lambda: len(reader.listings) >= passes + 3, timeout=60,
                           what="three more passes of the reader after the reset")
                status = json.loads((m.path / ".epochfs" / "status.json").read_text())
                left = store.candidates(after_rank=None, limit=1)
            top = sorted(os.listdir(m.path))
        assert not reader.wrong, f"wrong bytes read: {reader.wrong[:5]}"
        assert set(reader.listings) == {300}, f"the epoch lost files at some look: {set(reader.listings)}"
        assert set(reader.outcomes) == {"ok"}, reader.outcomes
        assert top == [".epochfs", "epoch-0", "epoch-1", "latest"]
        assert [e["epoch"] for e in status["epochs"]] == [0, 1]
        assert left == [], "nothing left to fetch"
    assert sum(remote.opens.values()) == opened, "nothing of the epochs was fetched again"
    print(f"\nindex replaced and epochs back {back:.3f}s after the start; reader: {dict(reader.outcomes)} "
          f"over {len(reader.listings)} passes; {sum(remote.opens.values()) - opened} objects fetched again")


def test_the_folder_views_published_epochs_stay_through_an_index_reset(tmp_path: Path) -> None:
    """The folder view (``--view folder``): after the reset the publisher finds the same epochs
    with the same manifests, so ``epoch-0/`` and ``epoch-1/`` stay the folders it published (same
    inode, not republished), and their entries read the right bytes."""
    objects = objects_of(120, size=800)
    remote = MemoryRemote(objects)
    cache, folder = tmp_path / "cache", tmp_path / "view"
    cut_two_epochs(cache, remote, 120)
    with Store(cache, create=True) as store:
        publisher = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir.absolute())
        publisher.recover()
        publisher.step(force_status=True)
        inodes = {n: (folder / f"epoch-{n}").stat().st_ino for n in (0, 1)}
        manifests = {n: (folder / ".epochfs" / f"epoch-{n}.manifest").read_bytes() for n in (0, 1)}
        assert files_under(folder / "epoch-1") == objects
        garble(cache, "samples", pages=3)
        with Store(cache, create=True) as fresh:  # the sampler's next start
            assert fresh.check_index() != "ok"
            fresh.recover(integrity="ok")
        step = publisher.step(force_status=True)  # the publisher's store follows the new index
        assert (step.published, step.retired) == ([], [])
        assert publisher.recover().stale == [], "a restart of the publisher keeps them too"
    assert {n: (folder / f"epoch-{n}").stat().st_ino for n in (0, 1)} == inodes
    assert {n: (folder / ".epochfs" / f"epoch-{n}.manifest").read_bytes() for n in (0, 1)} == manifests
    assert files_under(folder / "epoch-1") == objects
    assert sum(remote.opens.values()) == 120
