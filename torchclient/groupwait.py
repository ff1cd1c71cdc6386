"""How long a loader waits for an epoch's cut when the epoch's start is collective.

Why: with torch.distributed initialised over several ranks, a rank waits for its node's cut before
the batch-count all_reduce (:mod:`.peers`) while its peers already sit in that all_reduce, and the
process group's timeout bounds how long they may sit there: past it gloo raises, and NCCL's watchdog
aborts the job, with a collective timeout that says nothing of the epoch. The late rank's wait must
end first, so that its TimeoutError travels through the reduce and every rank raises a clear error.
So the loaders' ``timeout`` is lowered to the group's timeout less a margin (:func:`wait_bound`); a
world of one rank, or none, waits for ``timeout`` as given.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from .epochplan import distributed, reduce_device

log = logging.getLogger("epochfs.torchclient")
T = TypeVar("T")

NCCL_DEFAULT = 600.0
"""torch's documented default process-group timeout for NCCL (10 minutes), when torch cannot say."""
OTHER_DEFAULT = 1800.0
"""torch's documented default for the other backends (gloo, MPI, UCC: 30 minutes)."""
MARGIN = 30.0
"""Seconds the wait ends before the group's timeout (a tenth of it when that is more, half of it at
most): what the late rank still does before it reaches the reduce (reading the epoch's manifest, a
last cut request of up to 2 s), and ranks that reach the epoch's start at different times (one rank
writing a checkpoint)."""


@dataclass(frozen=True)
class GroupTimeout:
    """The default process group's timeout: ``seconds``, its ``backend``, and whether it was ``read``
    from the group (False: the backend's documented default)."""

    seconds: float
    backend: str
    read: bool

    def describe(self) -> str:
        where = "read from the process group" if self.read else "the default: it could not be read"
        return f"{self.seconds:g}s ({self.backend}, {where})"


def default_group_timeout(backend: str) -> float:
    """The timeout a process group of ``backend`` gets when ``init_process_group`` is not given one:
    torch's own constants when it has them (a CPU-only build has none for NCCL), else the documented
    values."""
    try:
        from torch.distributed.constants import default_pg_nccl_timeout, default_pg_timeout
    except ImportError:  # pragma: no cover - torch without distributed support
        return NCCL_DEFAULT if backend == "nccl" else OTHER_DEFAULT
    if backend == "nccl":
        return NCCL_DEFAULT if default_pg_nccl_timeout is None else default_pg_nccl_timeout.total_seconds()
    return default_pg_timeout.total_seconds()


def group_timeout() -> GroupTimeout | None:
    """The default process group's timeout for the device the epoch collectives reduce on; None
    without a world of several ranks (nobody waits for this rank then).

    torch 2.13 has no public getter for it: the value ``init_process_group(timeout=...)`` (or
    ``_set_pg_timeout``) gave is in the backend's options, read here as torch's own DeviceMesh reads
    it (``ProcessGroup._get_backend(device).options._timeout``). Where that fails (another torch, a
    custom backend), the backend's documented default is assumed."""
    if distributed() is None:
        return None
    return backend_timeout()


def backend_timeout() -> GroupTimeout:
    """The initialised default process group's timeout for the device the epoch collectives reduce on,
    whatever the world's size (:func:`group_timeout` asks only with several ranks; a GPU test of the
    NCCL reading needs a world of one, NCCL refusing two ranks on one GPU)."""
    import torch.distributed as dist

    backend = str(dist.get_backend())
    try:
        group = dist.group.WORLD
        seconds = group._get_backend(reduce_device()).options._timeout.total_seconds() if group else 0.0
    except (AttributeError, RuntimeError, TypeError, ValueError):
        seconds = 0.0
    if seconds > 0:
        return GroupTimeout(seconds, backend, read=True)
    return GroupTimeout(default_group_timeout(backend), backend, read=False)


def wait_bound(timeout: float, group: float | None) -> float:
    """The wait for a cut: ``timeout``, lowered below ``group`` (the process group's timeout in
    seconds; None: no world of several ranks) by the margin (:data:`MARGIN`)."""
    if group is None:
        return timeout
    margin = min(max(MARGIN, group / 10), group / 2)
    return min(timeout, group - margin)


class CutWait:
    """A loader's wait for an epoch's cut: its ``timeout``, bounded by the process group's when the
    epoch's start is collective. Says once (a warning on the ``epochfs.torchclient`` logger, when
    ``speak``: one rank per node) that it lowered the timeout, and why; ``who`` names the loader."""

    def __init__(self, *, who: str, speak: bool) -> None:
        self.who = who
        self.speak = speak
        self._said = False

    def seconds(self, timeout: float) -> float:
        """The wait for the next epoch's cut, ``timeout`` bounded (the group's timeout is read each
        time: a trainer may initialise torch.distributed after making the loader, or change it)."""
        group = group_timeout()
        bound = wait_bound(timeout, group.seconds if group is not None else None)
        if group is not None and bound < timeout and self.speak and not self._said:
            self._said = True
            log.warning("epochfs: %s waits at most %gs (not its timeout=%gs) for an epoch's cut: the process "
                        "group's timeout is %s, and a rank still waiting when its peers' batch-count "
                        "all_reduce times out would end the job with that collective's timeout error instead "
                        "of its own. To wait longer, raise the group's timeout: "
                        "init_process_group(timeout=timedelta(seconds=...))",
                        self.who, bound, timeout, group.describe())
        return bound

    def run(self, timeout: float, open_epoch: Callable[[float], T]) -> T:
        """``open_epoch(seconds)``, ``seconds`` being ``timeout`` bounded; a TimeoutError under a
        lowered bound says so."""
        seconds = self.seconds(timeout)
        try:
            return open_epoch(seconds)
        except TimeoutError as exc:
            if seconds >= timeout:
                raise
            raise TimeoutError(f"{exc}; the wait was {seconds:g}s, not timeout={timeout:g}s, to end before "
                               "the process group's timeout (raise it with init_process_group(timeout=...))"
                               ) from exc
