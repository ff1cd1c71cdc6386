"""The nodes' shard settings compared at an epoch's start: two nodes that would train on the same keys,
or split the keys by different counts, are refused on every rank before any batch.

Why here: each node's sidecar samples its own part of the keys (``--shard-index``/``--shard-count``)
and checks only its own settings; nothing on one node can see another's. A Job that hard-codes
``EPOCHFS_SHARD_INDEX``, a label equal on two pods, or nodes left on another ``--shard-count`` by a
partial upgrade give two nodes the same keys (and no node the rest) without a word, and training runs
on. The trainers are the one place that sees every node: each epoch's start already reduces a vector
over the whole job (:class:`~.peers.EpochReduce`), so each rank puts its node's shard in it, as read
from the mount's ``status.json`` (:data:`~.layout.SHARD_KEY`), and every rank decides alike.

A rank whose mount says no shard (a plain folder, an older sidecar, a sampler that has not recorded
it yet) is left out of the comparison. With ``partition="global"`` the same shard on every node is
the documented set-up (identical epochs on every node, split over the whole job), so only the counts
are compared there.
"""

from __future__ import annotations

import hashlib
import logging
import os
from dataclasses import dataclass

from .layout import SHARD_KEY, read_status

log = logging.getLogger("epochfs.torchclient")

SLOTS = 3
"""Numbers each rank puts in the epoch-start vector for its node's shard: index + 1 (0: unknown),
count, and the node's name as a number (:func:`node_number`)."""


@dataclass(frozen=True)
class NodeShard:
    """One node's shard as its sidecar publishes it."""

    index: int
    count: int
    node: str
    """Which sidecar (``<host>:<cache>``): the ranks of one node read the same one."""

    def slots(self) -> list[int]:
        """This shard as the :data:`SLOTS` numbers of the epoch-start vector."""
        return [self.index + 1, self.count, node_number(self.node)]


def node_number(node: str) -> int:
    """``node`` as a positive number below 2**56 (an int64 the reduce carries): two sidecars'
    names collide with odds of one in 2**56."""
    return 1 + int.from_bytes(hashlib.blake2b(node.encode(), digest_size=7).digest(), "big")


def node_shard(root: str | os.PathLike[str]) -> NodeShard | None:
    """The shard of the sidecar behind ``root``, from its ``status.json``; None where it says none."""
    doc = read_status(root)
    shard = doc.get(SHARD_KEY) if doc is not None else None
    if not isinstance(shard, dict):
        return None
    index, count, node = shard.get("index"), shard.get("count"), shard.get("node")
    if not (isinstance(index, int) and isinstance(count, int) and isinstance(node, str)
            and 0 <= index < count):
        return None
    return NodeShard(index, count, node)


class ShardSettingsError(ValueError):
    """The job's nodes sample overlapping or differently split shards of the keys; raised on every rank
    at an epoch's start, before any batch. ``.shards``: the lowest rank of each node that took part
    -> that node's (shard index, shard count)."""

    def __init__(self, message: str, shards: dict[int, tuple[int, int]]) -> None:
        self.shards = dict(sorted(shards.items()))
        super().__init__(message)


def _setting(index: int, count: int) -> str:
    return f"--shard-index {index} --shard-count {count}"


def check_shards(slots: list[list[int]], *, same_shard_ok: bool) -> None:
    """Raise :class:`ShardSettingsError` when the ranks' nodes (``slots[rank]``: :meth:`NodeShard.slots`)
    split the keys by different counts, or, unless ``same_shard_ok`` (``partition="global"``), two
    different nodes have the same shard. Every rank calls it with the same ``slots``."""
    nodes: dict[int, tuple[int, int, int]] = {}  # node number -> (its lowest rank, index, count)
    for rank, (index_plus_one, count, node) in enumerate(slots):
        if index_plus_one and node not in nodes:
            nodes[node] = (rank, index_plus_one - 1, count)
    shards = {rank: (index, count) for rank, index, count in nodes.values()}
    seen = sorted(nodes.values())
    for rank, index, count in seen:
        first, first_index, first_count = seen[0]
        if count != first_count:
            raise ShardSettingsError(
                f"the job's nodes split the keys by different --shard-count: rank {first}'s node has "
                f"{_setting(first_index, first_count)}, rank {rank}'s node {_setting(index, count)}; "
                "some keys would be trained on by two nodes and others by none. Give every node's sidecar "
                "the same --shard-count (the number of nodes) and each its own --shard-index", shards)
    if same_shard_ok:
        return
    by_index: dict[int, int] = {}
    for rank, index, count in seen:
        if index in by_index:
            raise ShardSettingsError(
                f"two nodes sample the same shard: rank {by_index[index]}'s node and rank {rank}'s node "
                f"(another sidecar) both have {_setting(index, count)}, so both train on the same keys "
                f"and other shards' keys are trained on by none. Give each node's sidecar its own "
                f"--shard-index (0 to {count - 1}); for identical epochs on every node on purpose, "
                'split over the whole job with partition="global"', shards)
        by_index[index] = rank


def unsampled_shards(slots: list[list[int]]) -> tuple[int, list[int]] | None:
    """The shard count and the shards no node of the job samples, where every rank's mount names
    its shard and all have one count (as :func:`check_shards` leaves them); None where none is
    missing or some rank's shard is unknown. Such shards' keys are fetched by no sidecar, so no
    epoch ever holds them: a Job of fewer pods than ``--shard-count`` (one left pending, or a
    count set for a larger run) trains on part of the dataset without an error."""
    if not slots or any(not index_plus_one for index_plus_one, _, _ in slots):
        return None
    counts = {count for _, count, _ in slots}
    if len(counts) != 1:
        return None
    (count,) = counts
    missing = sorted(set(range(count)) - {index_plus_one - 1 for index_plus_one, _, _ in slots})
    return (count, missing) if missing else None


_said: set[tuple[int, tuple[int, ...]]] = set()
"""The missing shards already warned of in this process: each set once, not at every epoch."""


def warn_unsampled(slots: list[list[int]]) -> None:
    """Log :func:`unsampled_shards` once a process (the caller's lowest rank only calls it)."""
    found = unsampled_shards(slots)
    if found is None or (found[0], tuple(found[1])) in _said:
        return
    count, missing = found
    _said.add((count, tuple(missing)))
    shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
    log.warning("no node of this job samples shard(s) %s of --shard-count %d: their keys are in no "
                "epoch, so training sees %d of %d parts of the dataset. Run a node for each shard, or set "
                "every sidecar's --shard-count to the number of nodes", shown, count, count - len(missing),
                count)
