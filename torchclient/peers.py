"""Ranks agreeing on an epoch's start: one rank's failure fails every rank, never hangs them.

Why: the start of an epoch is collective when torch.distributed is initialised (the all_reduce that
makes batch counts equal, :mod:`.epochplan`). A rank that fails before it (its epoch gone from its
node, a cut that did not come, a bad manifest) and simply raised would leave the others waiting in
that all_reduce, or worse, meeting the failed rank's *next* collective with theirs (the next epoch's
reduce, a DDP gradient sync): a mismatch that crashes or trains out of step. A rank that fails just
after it (no files to pad its batches with) leaves the others training while it is gone.

So each rank takes part in the reduce whatever happened, with its failure in it: one all_reduce
(MAX) of a vector holding the batch count and, per rank, a failure code and an "empty" flag. Every
rank then sees who failed and why: the failed rank raises its own error, the others
:class:`PeerEpochError` naming it. The failure after the reduce (a rank with no files to pad with)
is known from the reduced values, so every rank decides it alike. A resumed epoch's decision
(resume at the saved batch, or start over) is made the same way, in :func:`agree_resume`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .epochplan import Balance, ReduceOp, all_reduce_max, distributed, plan_batches

if TYPE_CHECKING:
    from .dataset import EpochDataset

# Why a rank failed, as a code a tensor can carry; the first matching class wins.
_REASONS: tuple[tuple[str, str], ...] = (
    ("EpochResumeError", "EpochResumeError: its resumed epoch is gone from its node"),
    ("FileNotFoundError", "FileNotFoundError: the epoch is not on its node"),
    ("TimeoutError", "TimeoutError: the epoch was not cut on its node in time"),
    ("OSError", "OSError: the epoch folder or its manifest could not be read"),
    ("ValueError", "ValueError: a bad manifest or setting"),
)
_OTHER = "an error opening or planning the epoch"
_NO_FILES = "RuntimeError: no files on its node to pad its batches with"


class PeerEpochError(RuntimeError):
    """Another rank could not open or plan this epoch, so no rank starts it.

    ``.epoch``, ``.rank`` (the lowest failed rank), ``.reason`` (its reason) and ``.failures``
    (every failed rank and its reason); the failed rank itself raised its own error."""

    def __init__(self, epoch: int, failures: dict[int, str]) -> None:
        self.epoch = epoch
        self.failures = dict(sorted(failures.items()))
        self.rank = min(self.failures)
        self.reason = self.failures[self.rank]
        named = "; ".join(f"rank {rank}: {why}" for rank, why in self.failures.items())
        super().__init__(
            f"epoch {epoch} cannot start: {named} (that rank raised its own error, which says more). "
            "Every rank raises here rather than wait for it in the batch-count all_reduce; iterating "
            "the next epoch on every rank goes on in step")


def failure_code(exc: BaseException) -> int:
    """The code of ``exc`` in the failure vector (1-based: 0 is "no failure")."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    for code, (name, _) in enumerate(_REASONS, start=1):
        if name in names:
            return code
    return len(_REASONS) + 1


def reason(code: int) -> str:
    """The words for a failure code."""
    return _REASONS[code - 1][1] if 1 <= code <= len(_REASONS) else _OTHER


class EpochReduce:
    """The batch-count reduce of one epoch (:data:`~.epochplan.Reduce`) carrying this rank's failure.

    ``failure``: what this rank's opening of the epoch raised (None: it opened); ``empty``: the epoch
    has no files on this node. Called once by :func:`~.epochplan.plan_batches` (not at all with
    ``balance="none"``: then :meth:`settle` raises the failure)."""

    def __init__(self, epoch: int, failure: Exception | None, empty: bool) -> None:
        self.epoch = epoch
        self.failure = failure
        self.empty = empty

    def __call__(self, value: int, op: ReduceOp) -> int:
        world = distributed()
        if world is None:
            self.settle()
            return value
        rank, size = world
        vector = [0] * (1 + 2 * size)
        vector[0] = value if op == "max" else -value  # one MAX reduce serves "min" too
        vector[1 + rank] = failure_code(self.failure) if self.failure is not None else 0
        vector[1 + size + rank] = int(self.empty)
        out = all_reduce_max(vector)
        failures = {peer: reason(code) for peer, code in enumerate(out[1:1 + size]) if code}
        if failures:
            self.settle()
            raise PeerEpochError(self.epoch, failures)
        target = out[0] if op == "max" else -out[0]
        empty = [peer for peer in range(size) if out[1 + size + peer]]
        if op == "max" and target > 0 and empty and not self.empty:
            # The empty ranks cannot pad up to the target and raise (plan_batches): so do the rest.
            raise PeerEpochError(self.epoch, dict.fromkeys(empty, _NO_FILES))
        return target

    def settle(self) -> None:
        """Raise this rank's own failure, if it had one."""
        if self.failure is not None:
            raise self.failure


class EpochSplit(Protocol):
    """What :func:`plan_epoch` reads of a loader: where its epochs are and how it cuts them into
    batches (:func:`~.epochplan.plan_batches`). Both loaders have these settings."""

    root: Path
    batch_size: int
    num_replicas: int
    rank: int
    shuffle: bool
    seed: int
    drop_last: bool
    balance: Balance


def plan_epoch(loader: EpochSplit, epoch: int,
               open_epoch: Callable[[], EpochDataset]) -> tuple[EpochDataset, list[list[int]], int]:
    """Open ``epoch`` (``open_epoch``) and cut this rank's batches of file indices: (dataset, batches,
    padding). Collective when torch.distributed is initialised: every rank must call it for the same
    epoch. What opening raised is not raised at once but carried into the batch-count reduce
    (:class:`EpochReduce`), so the other ranks learn of it there instead of waiting in it; this rank
    then raises it, the others :class:`PeerEpochError`."""
    dataset: EpochDataset | None = None
    failure: Exception | None = None
    try:
        dataset = open_epoch()
    except Exception as exc:  # reaches the other ranks through the reduce below
        failure = exc
    length = len(dataset) if dataset is not None else 0
    reduce = EpochReduce(epoch, failure, empty=dataset is not None and length == 0)
    batches, padded = plan_batches(length, epoch=epoch, batch_size=loader.batch_size,
                                   num_replicas=loader.num_replicas, rank=loader.rank, shuffle=loader.shuffle,
                                   seed=loader.seed, drop_last=loader.drop_last, balance=loader.balance,
                                   where=str(loader.root), reduce=reduce)
    reduce.settle()  # balance="none" made no reduce, so the failure is raised here
    assert dataset is not None  # else settle raised the failure
    return dataset, batches, padded


def agree_resume(skip: int, changed: bool) -> tuple[int, int, list[int]]:
    """Every rank's resume decision inputs: (the fewest batches any rank would skip, the most, the
    other ranks whose epoch is not the one their state was saved in). Collective (one all_reduce)."""
    world = distributed()
    if world is None:
        return skip, skip, []
    rank, size = world
    vector = [skip, -skip] + [0] * size
    vector[2 + rank] = int(changed)
    out = all_reduce_max(vector)
    return -out[1], out[0], [peer for peer in range(size) if out[2 + peer] and peer != rank]
