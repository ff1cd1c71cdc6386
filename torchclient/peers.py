"""Ranks agreeing on an epoch's start: one rank's failure fails every rank, never hangs them.

Why: the start of an epoch is collective when torch.distributed is initialised (the all_reduce that
makes batch counts equal, :mod:`.epochplan`). A rank that fails before it (its epoch gone from its
node, a cut that did not come, a bad manifest) and simply raised would leave the others waiting in
that all_reduce, or worse, meeting the failed rank's *next* collective with theirs (the next epoch's
reduce, a DDP gradient sync): a mismatch that crashes or trains out of step. A rank that fails just
after it (no files to pad its batches with) leaves the others training while it is gone.

So each rank takes part in the reduce whatever happened, with its failure in it: one all_reduce
(MAX) of a vector holding the batch count and, per rank, a failure code, an "empty" flag, the epoch
it iterates and its node's shard (:mod:`.shardcheck`). Every rank then sees who failed and why: the
failed rank raises its own error, the others :class:`PeerEpochError` naming it. Ranks that iterate
different epochs (restored from different checkpoints, one skipping an epoch) would otherwise pass
the reduce and train on mismatched epochs, schedules and shuffles without a word: every rank raises
:class:`EpochSkewError` instead, naming the epochs; nodes whose shards overlap or differ in count
raise :class:`~.shardcheck.ShardSettingsError`. The failure after the reduce (a rank with no files
to pad with) is known from the reduced values, so every rank decides it alike. A resumed epoch's decision
(resume at the saved batch, or start over) is made the same way, in :func:`agree_resume`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from .epochplan import Balance, Partition, ReduceOp, all_reduce_max, distributed, plan_batches
from .shardcheck import SLOTS, NodeShard, check_shards, node_shard, warn_unsampled

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


class EpochSkewError(PeerEpochError):
    """The ranks called for different epochs, so none starts: ``.epochs`` maps each epoch asked for to
    the ranks that asked for it; ``.failures`` names the ranks whose epoch is not this rank's."""

    def __init__(self, epoch: int, epochs: dict[int, list[int]]) -> None:
        self.epochs = dict(sorted(epochs.items()))
        others = {rank: f"iterates epoch {n}"
                  for n, ranks in self.epochs.items() if n != epoch for rank in ranks}
        self.epoch, self.failures = epoch, dict(sorted(others.items()))
        self.rank = min(self.failures)
        self.reason = self.failures[self.rank]
        named = "; ".join(f"epoch {n} on {_ranks(ranks)}" for n, ranks in self.epochs.items())
        RuntimeError.__init__(
            self, f"epoch {epoch} cannot start: the ranks iterate different epochs ({named}). The start "
            "of an epoch is collective: every rank must iterate the same epoch (resume every rank from "
            "the same checkpoint's epoch); no rank started one")


def _ranks(ranks: list[int], shown: int = 8) -> str:
    """``ranks 0, 1, 2`` (the first ``shown``, then how many more)."""
    more = f" and {len(ranks) - shown} more" if len(ranks) > shown else ""
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks[:shown]))}{more}"


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
    has no files on this node; ``shard``: this node's shard (None: its mount says none);
    ``same_shard_ok``: the loader splits over the whole job (``partition="global"``), where every
    node may have the same shard. Called once by :func:`~.epochplan.plan_batches` (not at all with
    ``balance="none"``: then :meth:`settle` raises the failure)."""

    def __init__(self, epoch: int, failure: Exception | None, empty: bool, *,
                 shard: NodeShard | None = None, same_shard_ok: bool = False) -> None:
        self.epoch = epoch
        self.failure = failure
        self.empty = empty
        self.shard = shard
        self.same_shard_ok = same_shard_ok

    def _vector(self, value: int, rank: int, size: int) -> list[int]:
        """This rank's part of the reduced vector: the value, then per rank its failure code, empty
        flag, epoch + 1 and :data:`~.shardcheck.SLOTS` shard numbers (each rank writes its own)."""
        vector = [0] * (1 + (3 + SLOTS) * size)
        vector[0] = value
        vector[1 + rank] = failure_code(self.failure) if self.failure is not None else 0
        vector[1 + size + rank] = int(self.empty)
        vector[1 + 2 * size + rank] = self.epoch + 1
        if self.shard is not None:
            start = 1 + 3 * size + SLOTS * rank
            vector[start:start + SLOTS] = self.shard.slots()
        return vector

    def _agree(self, out: list[int], rank: int, size: int) -> None:
        """Every rank alike: :class:`EpochSkewError` when the ranks asked for different epochs,
        :class:`~.shardcheck.ShardSettingsError` when the nodes' shards overlap or differ in count
        (this rank's own failure, if any, chained: it is a consequence)."""
        epochs: dict[int, list[int]] = {}
        for peer, plus_one in enumerate(out[1 + 2 * size:1 + 3 * size]):
            epochs.setdefault(plus_one - 1, []).append(peer)
        if len(epochs) > 1:
            raise EpochSkewError(self.epoch, epochs) from self.failure
        start = 1 + 3 * size
        slots = [out[start + SLOTS * peer:start + SLOTS * (peer + 1)] for peer in range(size)]
        try:
            check_shards(slots, same_shard_ok=self.same_shard_ok)
        except ValueError as exc:
            raise exc from self.failure
        if rank == 0 and not self.same_shard_ok:
            warn_unsampled(slots)

    def __call__(self, value: int, op: ReduceOp) -> int:
        world = distributed()
        if world is None:
            self.settle()
            return value
        rank, size = world
        # one MAX reduce serves "min" too
        out = all_reduce_max(self._vector(value if op == "max" else -value, rank, size))
        self._agree(out, rank, size)
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
    partition: Partition


def plan_epoch(loader: EpochSplit, epoch: int,
               open_epoch: Callable[[], EpochDataset]) -> tuple[EpochDataset, list[list[int]], int]:
    """Open ``epoch`` (``open_epoch``) and cut this rank's batches of file indices: (dataset, batches,
    padding). Collective when torch.distributed is initialised: every rank must call it for the same
    epoch. What opening raised is not raised at once but carried into the batch-count reduce
    (:class:`EpochReduce`), so the other ranks learn of it there instead of waiting in it; this rank
    then raises it, the others :class:`PeerEpochError`. Every rank raises :class:`EpochSkewError`
    when they called for different epochs, and :class:`~.shardcheck.ShardSettingsError` when their
    nodes' shards (read from each mount's ``status.json``) overlap or differ in count."""
    dataset: EpochDataset | None = None
    failure: Exception | None = None
    try:
        dataset = open_epoch()
    except Exception as exc:  # reaches the other ranks through the reduce below
        failure = exc
    length = len(dataset) if dataset is not None else 0
    compared = distributed() is not None and loader.balance != "none"  # else no reduce to carry it
    shard = node_shard(loader.root) if compared else None
    reduce = EpochReduce(epoch, failure, empty=dataset is not None and length == 0, shard=shard,
                         same_shard_ok=loader.partition == "global")
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
