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
from pathlib import Path
from typing import Any

from .describe import check_root
from .layout import list_epochs, read_status


def newest_live_epoch(root: str | os.PathLike[str]) -> int | None:
    """This node's newest live epoch under ``root``: ``latest_epoch`` of the mount's
    ``status.json`` (the sidecar's word: None before its first cut); on a plain folder without
    one, the highest ``epoch-N`` folder (None when there is none)."""
    return _own_start(Path(root), read_status(root))[0]


def start_epoch(root: str | os.PathLike[str]) -> int:
    """The epoch a new training run reads first: the newest live epoch under ``root`` (a kept
    cache), or the first cut when none exists yet (0 on a new cache; on a cache whose index was
    reset and lost every epoch, the number after the old ones, as ``status.json``'s
    ``first_epoch.epoch`` names it). Collective when
    torch.distributed is initialised with more than one rank (every rank calls it, as it makes
    its loader): the largest answer of any rank, so every rank starts at the same epoch; pass
    ``jump=True`` for that first epoch, since another node's cache may be ahead of this one's.

    Raises FileNotFoundError for a ``root`` that is not there or is certainly not the mount
    (the same message the loaders give), rather than answer 0 for a mount not up yet."""
    path = Path(root)
    check_root(path, present=path.is_dir())
    newest, first_cut = _own_start(path, read_status(path))
    return _agreed(first_cut if newest is None else newest)


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
