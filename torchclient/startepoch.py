"""``start_epoch``: the first epoch a new training run reads, wherever the cache is.

Why: epoch numbers are never reused (the store cuts only above the newest), so on a kept cache (a
hostPath cache that outlived its pod, a replacement pod, another release sharing the folder) the
epochs a new run meets may start at 7, and epoch 0 is gone for good: a loop written
``for epoch in range(100)`` fails at once there ("epoch 0 is not live"). A new run starts at the
cache's newest live epoch instead (what ``latest`` points to: it exists, so nothing waits, and the
epoch after it is the next cut, so the loop goes on as on a new cache), or at the first cut when no
epoch exists yet (0, or above the old numbers after an index reset that lost every epoch). A run
resumed from a checkpoint does not use this: it goes on at its state's absolute epoch
(``loader.next_epoch``), which a jump reaches.

Every rank must iterate the same epoch (:mod:`.peers`), and each node's cache may be at another
number (a node that ran before beside a new one): with torch.distributed initialised the ranks
take the largest of their answers (one all_reduce), and a node whose newest epoch is below it
reaches it by a jump (``loader.epoch(first, jump=True)``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from .describe import check_root, describe_root
from .layout import list_epochs, read_status
from .waiting import Progress, check_progress, check_timeout, print_progress


def newest_live_epoch(root: str | os.PathLike[str]) -> int | None:
    """This node's newest live epoch under ``root``: ``latest_epoch`` of the mount's
    ``status.json`` (the sidecar's word: None before its first cut); on a plain folder without
    one, the highest ``epoch-N`` folder (None when there is none)."""
    return _own_start(Path(root), read_status(root))[0]


def start_epoch(root: str | os.PathLike[str], *, wait: bool = True, timeout: float = 600.0,
                progress: Progress | None = print_progress) -> int:
    """The epoch a new training run reads first: the newest live epoch under ``root`` (a kept
    cache), or the first cut when none exists yet (0 on a new cache; on a cache whose index was
    reset and lost every epoch, the number after the old ones, as ``status.json``'s
    ``first_epoch.epoch`` names it). Collective when
    torch.distributed is initialised with more than one rank (every rank calls it, as it makes
    its loader): the largest answer of any rank, so every rank starts at the same epoch; pass
    ``jump=True`` for that first epoch, since another node's cache may be ahead of this one's.

    A ``root`` that shows neither ``.epochfs/status.json`` nor an epoch is a mount point the
    sidecar has not mounted yet (a trainer started beside the sidecar, not after it): answered
    at once, 0 sent a kept cache's trainer to an epoch retired for good. So it is waited for, as
    the loaders wait for an epoch (``wait``, ``timeout``, ``progress`` as theirs;
    :func:`_view_up`). Raises FileNotFoundError for a ``root`` that is not there or is certainly
    not the mount (the sidecar's ``--cache`` folder, a folder with files that is no mount point:
    :func:`.describe.not_the_mount`; the same message the loaders give), and TimeoutError when no
    view came."""
    timeout = check_timeout(timeout)
    check_progress(progress)
    path = Path(root)
    check_root(path, present=path.is_dir())
    status = read_status(path)
    if status is None and not list_epochs(path) and wait:
        status = _view_up(path, timeout, progress)
    newest, first_cut = _own_start(path, status)
    return _agreed(first_cut if newest is None else newest)


def _view_up(root: Path, timeout: float, progress: Progress | None) -> dict[str, Any] | None:
    """Wait until ``root`` shows the sidecar's ``status.json`` or an epoch folder; its status
    then (None: a plain folder's epochs). Lines as the loaders' wait: the first at once, then
    every 5 s; looks back off from 20 ms to 0.5 s."""
    start = time.monotonic()
    delay, next_report = 0.02, start
    while True:
        now = time.monotonic()
        if now >= next_report:
            check_root(root, present=True)
            if progress is not None:
                progress(f"epochfs: waiting for the sidecar's view under {root} to know where a new "
                         f"run starts ({now - start:.0f}s so far; {describe_root(root)})")
            next_report = now + 5.0
        if now - start >= timeout:
            raise TimeoutError(f"no epochfs view under {root} within {timeout:g}s to tell where a new "
                               f"run starts ({describe_root(root)})")
        time.sleep(min(delay, max(0.0, timeout - (now - start))))
        delay = min(delay * 1.5, 0.5)
        if (status := read_status(root)) is not None or list_epochs(root):
            return status


def _own_start(root: Path, status: dict[str, Any] | None) -> tuple[int | None, int]:
    """(the newest live epoch, the number the first cut gets while none is live) from one reading
    of ``status.json``; a plain folder's highest ``epoch-N`` and 0 without one (a sidecar that
    does not name its first cut: 0)."""
    if status is None:
        epochs = list_epochs(root)
        return (epochs[-1] if epochs else None), 0
    first = status.get("first_epoch")
    first_cut = _epoch_number(first.get("epoch")) if isinstance(first, dict) else None
    return _epoch_number(status.get("latest_epoch")), first_cut or 0


def _epoch_number(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _agreed(first: int) -> int:
    """``first`` agreed over the world: the largest of every rank's (each node's cache is its own)."""
    from .epochplan import all_reduce_max, distributed  # torch only where the ranks must agree

    return first if distributed() is None else all_reduce_max([first])[0]
