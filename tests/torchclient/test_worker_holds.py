"""The epoch hold stays in the training process: DataLoader workers never keep an epoch open.

An open folder handle on ``epoch-N/`` is what keeps the epoch in use on the mount, and the kernel
tells FUSE the folder is released only when the last copy of the handle closes. Workers forked while
the training process held its first epoch used to inherit that handle and keep it for as long as they
lived (persistent workers: the whole job), so the epoch was never retired. These tests read real
folders with the mount's layout through a real DataLoader with persistent worker processes and look
at the open files of each process in ``/proc/<pid>/fd``.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import admit, make_objects, mounted, open_store

from epochfs.torchclient import EpochLoader
from epochfs.torchclient.plainfolder import publish_epoch

FILES = 8
BATCH = 2


def publish(root: Path, epochs: int) -> None:
    """Epochs 0..epochs-1, each holding the same ``FILES`` files of 16 bytes."""
    objects = root.parent / "objects"
    objects.mkdir()
    for i in range(FILES):
        (objects / f"{i}.bin").write_bytes(bytes([i]) * 16)
    for epoch in range(epochs):
        publish_epoch(root, epoch, {f"train/{i:02d}.bin": objects / f"{i}.bin" for i in range(FILES)})


def open_inside(pid: int, folder: Path, *, folder_only: bool = False) -> list[str]:
    """What process ``pid`` has open inside ``folder`` (only ``folder`` itself with ``folder_only``)."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed since the listing
        if target == str(folder) or (not folder_only and target.startswith(str(folder) + os.sep)):
            found.append(target)
    return found


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_do_not_keep_the_first_epoch_open(tmp_path: Path, context: str) -> None:
    root = tmp_path / "mnt"
    publish(root, 2)
    epoch0 = root / "epoch-0"
    loader = EpochLoader(root, batch_size=BATCH, num_workers=2, decode="bytes", progress=None, report=False,
                         wait=False, multiprocessing_context=context)
    try:
        run = loader.epoch(0)
        batches = iter(run)
        # A batch from each worker (the loader takes them in turn): both have run, so each has
        # passed its start after the fork, started while the training process holds epoch-0.
        next(batches)
        next(batches)
        workers = loader.worker_pids()
        assert len(workers) == 2
        assert run.dataset is not None and run.dataset.held
        assert open_inside(os.getpid(), epoch0, folder_only=True), "the training process holds its epoch"
        for pid in workers:
            assert not open_inside(pid, epoch0, folder_only=True), f"worker {pid} holds epoch-0"
        assert sum(1 for _ in batches) == FILES // BATCH - 2
        assert sum(1 for _ in loader.epoch(1)) == FILES // BATCH
        assert loader.worker_pids() == workers, "the same persistent workers served both epochs"
        assert not run.dataset.held and not open_inside(os.getpid(), epoch0)
        for pid in workers:
            assert not open_inside(pid, epoch0), f"worker {pid} keeps epoch-0 the parent released"
    finally:
        loader.close()


def test_a_forked_child_drops_the_hold_and_the_parent_keeps_it(tmp_path: Path) -> None:
    """Any fork, not only a DataLoader's: the child closes its copy, the parent's hold is untouched."""
    from epochfs.torchclient import EpochDataset

    root = tmp_path / "mnt"
    publish(root, 1)
    dataset = EpochDataset(root, 0, progress=None)
    assert dataset.held
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it holds, then exit without running pytest's teardown
        try:
            held = bool(open_inside(os.getpid(), root / "epoch-0")) or dataset.held
            os.write(write, b"1" if held else b"0")
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        child_held = answer.read()
    os.waitpid(pid, 0)
    assert child_held == b"0", "the forked child kept the parent's hold"
    assert dataset.held and open_inside(os.getpid(), root / "epoch-0", folder_only=True)
    dataset.release()


def last_read(cache: Path, n: int) -> float:
    """When the mount last recorded a read (or a renewed hold) of epoch ``n``; 0 before any."""
    db = sqlite3.connect(f"file:{cache / 'index.sqlite'}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT last_read FROM epochs WHERE n=?", (n,)).fetchone()
        return float(row[0]) if row and row[0] else 0.0
    finally:
        db.close()


@pytest.mark.long
@pytest.mark.fuse
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE")
def test_a_real_mount_retires_the_first_epoch_while_the_workers_live(tmp_path: Path) -> None:
    """End to end: with epoch 1 read and epoch 0 released, the sidecar retires epoch 0 once its
    in-use window (2 s here) has passed, although the workers forked during epoch 0 still run."""
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache, keep_epochs=1, in_use_seconds=2.0)
    admit(store, make_objects(8, 1000, seed=3))
    store.cut(0)
    admit(store, make_objects(2, 1000, start=100, seed=4))
    store.cut(1)
    try:
        with mounted(cache, mnt):
            loader = EpochLoader(mnt, batch_size=BATCH, num_workers=2, decode="bytes", progress=None,
                                 report=False, wait=False)
            try:
                batches = iter(loader.epoch(0))
                next(batches)  # the workers are forked now, while the training process holds epoch 0
                # The hold counts only once the mount recorded epoch 0 as read; then it renews it.
                wait_until(lambda: last_read(cache, 0) > 0, timeout=10, what="the reads of epoch 0 recorded")
                assert sum(1 for _ in batches) == 8 // BATCH - 1
                workers = loader.worker_pids()
                assert sum(1 for _ in loader.epoch(1)) == 10 // BATCH
                wait_until(lambda: 0 in store.retire(), timeout=30,
                           what="epoch 0 retired while the workers forked during it still run")
                assert loader.worker_pids() == workers and all(os.path.exists(f"/proc/{p}") for p in workers)
            finally:
                loader.close()
    finally:
        store.close()
