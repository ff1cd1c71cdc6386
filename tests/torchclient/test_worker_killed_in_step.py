"""A DataLoader worker killed while the training step runs (an OOM kill between two batches).

torch's SIGCHLD handler raises the worker's death in the training code, wherever the main thread is,
so the epoch's run never sees the error, only its generator being dropped. docs/torchclient.md
("Failures") promises that the epoch fails and the next one starts fresh workers: this checks the
next epoch, with real worker processes and a real SIGKILL.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from epochfs.torchclient import EpochLoader
from epochfs.torchclient.plainfolder import publish_epoch


def _folder(tmp_path: Path, count: int, epochs: int) -> Path:
    objects = tmp_path / "objects"
    objects.mkdir()
    for i in range(count):
        (objects / f"s{i:04d}.raw").write_bytes(np.array([i], dtype=np.int32).tobytes())
    root = tmp_path / "mnt"
    root.mkdir()
    for epoch in range(epochs):
        publish_epoch(root, epoch, {f"s{i:04d}.raw": objects / f"s{i:04d}.raw" for i in range(count)})
    return root


def _ids(batch: torch.Tensor) -> list[int]:
    return batch.contiguous().view(torch.int32).view(-1).tolist()


def _kill_during_the_step(pid: int) -> None:
    """SIGKILL worker ``pid`` and return once torch's SIGCHLD handler has run here, in the step.

    ``waitid`` with WNOWAIT returns when the worker is dead and waitable, not reaped (torch's handler
    looks for it among the waitable children; the kernel sent SIGCHLD as it became so);
    ``pthread_sigmask`` then runs the pending Python signal handlers at once, so the handler's error
    is raised by this call, not at some later bytecode."""
    os.kill(pid, signal.SIGKILL)
    os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    signal.pthread_sigmask(signal.SIG_BLOCK, [])


def test_a_worker_killed_during_the_step_fails_its_epoch_only(tmp_path: Path) -> None:
    root = _folder(tmp_path, 24, epochs=3)
    with EpochLoader(root, batch_size=2, num_workers=2, decode="bytes", report=False, progress=None,
                     wait=False) as loader:
        assert len([_ids(b) for b in loader.epoch(0)]) == 12
        workers = loader.worker_pids()
        raised_in_step = False
        with pytest.raises(RuntimeError, match=r"killed by signal|exited unexpectedly"):
            for number, _batch in enumerate(loader.epoch(1)):
                if number == 2:
                    raised_in_step = True
                    _kill_during_the_step(workers[1])
                    raised_in_step = False
        assert raised_in_step, "the death reached the training code, not the loader's run"
        assert not loader.history[-1].complete
        assert loader.state_dict()["batches_yielded"] == 3
        got = sorted(i for batch in loader.epoch(2) for i in _ids(batch))
        assert got == list(range(24))
        assert loader.history[-1].complete
        fresh = loader.worker_pids()
        assert len(fresh) == 2 and not set(fresh) & set(workers), "the next epoch runs on new workers"


def _take_and_die(event: Any) -> None:
    """Take ``event``'s lock, as a DataLoader worker does while it checks the event between
    batches, and be killed holding it."""
    event._cond.acquire()
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.timeout(60)
def test_a_worker_killed_holding_the_workers_event_lock_leaves_the_next_epoch_free(tmp_path: Path) -> None:
    """The worst instant for an out-of-memory kill: while the worker holds the lock of the event
    torch's shutdown sets. The lock then stays taken for ever; the next epoch replaces the broken
    DataLoader without waiting for it (the moment is made certain by a process of the same
    DataLoader's making that takes that lock and is killed, beside a worker killed)."""
    root = _folder(tmp_path, 24, epochs=2)
    with EpochLoader(root, batch_size=2, num_workers=2, decode="bytes", report=False, progress=None,
                     wait=False) as loader:
        assert len(list(loader.epoch(0))) == 12
        workers = loader.worker_pids()
        event = loader._workers.dataloader()._iterator._workers_done_event
        holder = multiprocessing.get_context("fork").Process(target=_take_and_die, args=(event,))
        holder.start()
        holder.join(timeout=30)
        assert holder.exitcode == -signal.SIGKILL
        assert not event._cond.acquire(timeout=0.1), "the lock stays taken by the dead process"
        with pytest.raises(RuntimeError, match=r"killed by signal|exited unexpectedly"):
            _kill_during_the_step(workers[0])
        got = sorted(i for batch in loader.epoch(1) for i in _ids(batch))
        assert got == list(range(24))
        fresh = loader.worker_pids()
        assert len(fresh) == 2 and not set(fresh) & set(workers), "the next epoch runs on new workers"
