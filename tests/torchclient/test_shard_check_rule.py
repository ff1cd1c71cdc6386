"""The rule that compares the nodes' shards (``shardcheck.check_shards``) over worlds no test starts as
processes: ranks of one node, a mount that names no shard, ``partition="global"``, and the reading of
``status.json``'s ``shard``. The same rule on real sidecars and gloo ranks: test_shard_settings.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from epochfs.torchclient.layout import control_dir
from epochfs.torchclient.shardcheck import (
    NodeShard,
    ShardSettingsError,
    check_shards,
    node_shard,
    unsampled_shards,
    warn_unsampled,
)

UNKNOWN = [0, 0, 0]


def _slots(*shards: tuple[int, int, str] | None) -> list[list[int]]:
    return [NodeShard(*s).slots() if s else UNKNOWN for s in shards]


def test_ranks_of_one_node_and_distinct_shards_pass() -> None:
    check_shards(_slots((0, 2, "a"), (0, 2, "a"), (1, 2, "b"), (1, 2, "b")), same_shard_ok=False)


def test_a_mount_without_a_shard_is_left_out() -> None:
    check_shards(_slots((0, 2, "a"), None, (1, 2, "b")), same_shard_ok=False)
    check_shards(_slots(None, None), same_shard_ok=False)


def test_the_same_shard_on_two_nodes_is_refused_unless_global() -> None:
    world = _slots((0, 2, "a"), (0, 2, "a"), (0, 2, "b"), (0, 2, "b"))
    with pytest.raises(ShardSettingsError, match="rank 0's node and rank 2's node") as caught:
        check_shards(world, same_shard_ok=False)
    assert caught.value.shards == {0: (0, 2), 2: (0, 2)}
    check_shards(world, same_shard_ok=True)


def test_different_counts_are_refused_even_when_global() -> None:
    world = _slots((0, 2, "a"), (1, 3, "b"))
    for same_shard_ok in (False, True):
        with pytest.raises(ShardSettingsError, match="--shard-index 0 --shard-count 2, rank 1's node "
                                                     "--shard-index 1 --shard-count 3"):
            check_shards(world, same_shard_ok=same_shard_ok)


def test_the_shard_is_read_from_status_json(tmp_path: Path) -> None:
    control_dir(tmp_path).mkdir()
    status = control_dir(tmp_path) / "status.json"
    assert node_shard(tmp_path) is None, "no status.json: a plain folder"
    status.write_text(json.dumps({"samples": 3}))
    assert node_shard(tmp_path) is None, "an older sidecar's document"
    status.write_text(json.dumps({"shard": {"index": 1, "count": 2, "node": "h:/c"}}))
    assert node_shard(tmp_path) == NodeShard(1, 2, "h:/c")
    status.write_text(json.dumps({"shard": {"index": 2, "count": 2, "node": "h:/c"}}))
    assert node_shard(tmp_path) is None, "an index out of its count is no shard"


def test_shards_no_node_samples_are_named_where_every_shard_is_known() -> None:
    assert unsampled_shards(_slots((0, 3, "a"), (0, 3, "a"), (2, 3, "b"))) == (3, [1])
    assert unsampled_shards(_slots((0, 2, "a"), (1, 2, "b"))) is None, "every shard sampled"
    assert unsampled_shards(_slots((0, 2, "a"), None)) is None, "a rank's shard unknown: it may be shard 1"
    assert unsampled_shards(_slots((0, 1, "a"))) is None, "one node of one shard"


def test_the_warning_is_logged_once_a_process(caplog: pytest.LogCaptureFixture) -> None:
    world = _slots((0, 4, "a"), (3, 4, "b"))
    with caplog.at_level(logging.WARNING, logger="epochfs.torchclient"):
        for _ in range(3):
            check_shards(world, same_shard_ok=False)
            warn_unsampled(world)
    said = [r.getMessage() for r in caplog.records if "no node of this job samples" in r.getMessage()]
    assert said == ["no node of this job samples shard(s) 1, 2 of --shard-count 4: their keys are in no "
                    "epoch, so training sees 2 of 4 parts of the dataset. Run a node for each shard, or set "
                    "every sidecar's --shard-count to the number of nodes"]
