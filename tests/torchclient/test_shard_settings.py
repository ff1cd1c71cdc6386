"""Nodes whose sidecars sample the same shard, or split the keys by different counts, are refused on
every rank at the epoch's start; nodes with their own shards of one count train as before.

Four real ``epochfs sidecar`` over one ``file://`` remote, each a node of its own: A (FUSE view,
``--shard-index 0 --shard-count 2``), B (folder view, 0 of 2: the same shard as A), C (FUSE, 1 of 2)
and D (FUSE, 1 of 3). Each view publishes its shard in ``status.json``. Two real gloo ranks (one per
node, torchrun's variables) then read two of the mounts with a loader, an all_reduce per batch as
DDP's gradient sync: A and B (both train on shard 0, shard 1 by no one) and A and D (keys split by
2 and by 3) must raise ``ShardSettingsError`` on both ranks before any batch, naming both nodes'
settings; A and C train; so do two ranks of one node (both read A), and A and B with
``partition="global"`` (the same epochs on every node, split over the job, is what it is for).
One node of a count of two trains on half the keys: its rank 0 warns once that no node samples shard 1.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent.parent))  # the helpers, also when run as a rank's script
sys.path.insert(0, str(Path(__file__).parent))
from common import wait_until
from folderview_helpers import cut, folder_sidecar, write_remote
from sidecar_helpers import running_sidecar
from two_ranks import run_two_ranks

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]

KEYS = 24


def _status(mount: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((mount / ".epochfs" / "status.json").read_text()))
    except (OSError, ValueError):
        return {}


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """The four nodes' mounts (A, B, C, D), each with its epoch 0 cut."""
    base = tmp_path_factory.mktemp("shard_settings")
    remote = base / "remote"
    write_remote(remote, {f"train/{i:03d}.raw": np.array([i], dtype=np.int32).tobytes() for i in range(KEYS)})
    for name in "ACD":
        (base / name).mkdir()
    (base / "B").mkdir(mode=0o777)

    def shard(index: int, count: int) -> tuple[str, ...]:
        return ("--shard-index", str(index), "--shard-count", str(count))

    with contextlib.ExitStack() as stack:
        cars = {
            name: stack.enter_context(
                running_sidecar(base / name, remote=f"file://{remote}", endpoint="", extra=shard(*setting))
            )
            for name, setting in (("A", (0, 2)), ("C", (1, 2)), ("D", (1, 3)))
        }
        cars["B"] = stack.enter_context(folder_sidecar(base / "B", remote, extra=shard(0, 2)))
        for name, car in cars.items():
            if name == "B":
                assert cut(car, "epoch=0")[0] in (200, 202)
            wait_until(lambda m=car.mount: (m / "epoch-0").is_dir(), timeout=60, what=f"{name}'s epoch 0")
            wait_until(lambda m=car.mount: "shard" in _status(m), timeout=30, what=f"{name}'s shard")
        yield {name: car.mount for name, car in cars.items()} | {
            f"{name}-cache": car.cache for name, car in cars.items()
        }


def test_each_view_publishes_its_shard_in_status(nodes: dict[str, Path]) -> None:
    host = socket.gethostname()
    for name, (index, count) in {"A": (0, 2), "B": (0, 2), "C": (1, 2), "D": (1, 3)}.items():
        assert _status(nodes[name])["shard"] == {
            "index": index,
            "count": count,
            "node": f"{host}:{nodes[name + '-cache']}",
        }, name


CASES: dict[str, tuple[tuple[str, str], str, str]] = {
    "same-epoch": (("A", "B"), "node", "epoch"),
    "same-array": (("A", "B"), "node", "array"),
    "counts": (("A", "D"), "node", "epoch"),
    "own shards": (("A", "C"), "node", "epoch"),
    "one node": (("A", "A"), "node", "epoch"),
    "global": (("A", "B"), "global", "epoch"),
}
"""Each case: the two ranks' nodes, the partition, the loader. One pair of ranks runs them all in
turn (a refused epoch raises on both ranks alike, so their group goes on to the next case): each
pair started costs seconds of torch's import."""


@pytest.fixture(scope="module")
def ran(nodes: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """What each rank saw in each case."""
    base = tmp_path_factory.mktemp("shard_ranks")
    plan = {
        name: [[str(nodes[n]) for n in roots], partition, kind]
        for name, (roots, partition, kind) in CASES.items()
    }
    (base / "plan.json").write_text(json.dumps(plan))
    run_two_ranks(__file__, [str(base)])
    return {
        name: [json.loads((base / f"{name}-rank{rank}.json").read_text()) for rank in range(2)]
        for name in CASES
    }


def _rank_main(rank: int, base: str) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from epochfs.torchclient import ArrayLoader, EpochLoader

    dist.init_process_group(
        "gloo", init_method=f"file://{base}/store", rank=rank, world_size=2, timeout=timedelta(seconds=60)
    )
    said: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("epochfs.torchclient").addHandler(handler)
    try:
        for name, (roots, partition, kind) in json.loads(Path(f"{base}/plan.json").read_text()).items():
            options: dict[str, Any] = dict(
                batch_size=2, report=False, progress=None, timeout=30, partition=partition
            )
            out: dict[str, Any] = {"batches": 0}
            start = len(said)
            try:
                root = roots[rank]
                loader: Any = (
                    ArrayLoader(root, format="raw", dtype="int32", shape=(1,), num_threads=2, **options)
                    if kind == "array"
                    else EpochLoader(root, num_workers=0, decode="bytes", **options)
                )
                with loader:
                    for _ in loader.epoch(0):
                        out["batches"] += 1
                        dist.all_reduce(torch.ones(1))  # the gradient sync of a DDP step
            except Exception as exc:  # what the test checks, per rank
                out |= {
                    "error": type(exc).__name__,
                    "message": str(exc),
                    "shards": {str(k): list(v) for k, v in getattr(exc, "shards", {}).items()},
                }
            out["warned"] = said[start:]
            Path(f"{base}/{name}-rank{rank}.json").write_text(json.dumps(out))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("case", ["same-epoch", "same-array"])
def test_two_nodes_with_the_same_shard_fail_every_rank(
    ran: dict[str, list[dict[str, Any]]], case: str
) -> None:
    for rank, out in enumerate(ran[case]):
        assert out.get("error") == "ShardSettingsError", (rank, out)
        assert out["batches"] == 0, "raised before any batch"
        assert out["shards"] == {"0": [0, 2], "1": [0, 2]}, out
        assert (
            "two nodes sample the same shard: rank 0's node and rank 1's node (another sidecar) both "
            "have --shard-index 0 --shard-count 2"
        ) in out["message"], out


def test_nodes_with_different_shard_counts_fail_every_rank(ran: dict[str, list[dict[str, Any]]]) -> None:
    for rank, out in enumerate(ran["counts"]):
        assert out.get("error") == "ShardSettingsError", (rank, out)
        assert out["batches"] == 0, "raised before any batch"
        assert (
            "rank 0's node has --shard-index 0 --shard-count 2, rank 1's node --shard-index 1 --shard-count 3"
        ) in out["message"], out


def test_a_shard_no_node_samples_is_warned_of_by_rank_zero(ran: dict[str, list[dict[str, Any]]]) -> None:
    warned = {case: [out["warned"] for out in outs] for case, outs in ran.items()}
    assert warned.pop("one node") == [[
        "no node of this job samples shard(s) 1 of --shard-count 2: their keys are in no epoch, so training "
        "sees 1 of 2 parts of the dataset. Run a node for each shard, or set every sidecar's --shard-count "
        "to the number of nodes"], []]
    assert all(ranks == [[], []] for ranks in warned.values()), warned


@pytest.mark.parametrize("case", ["own shards", "one node", "global"])
def test_distinct_shards_one_node_or_a_global_split_train(
    ran: dict[str, list[dict[str, Any]]], case: str
) -> None:
    zero, one = ran[case]
    assert "error" not in zero and "error" not in one, (zero, one)
    assert zero["batches"] == one["batches"] > 0, (zero, one)


if __name__ == "__main__":
    _rank_main(int(sys.argv[1]), sys.argv[2])
