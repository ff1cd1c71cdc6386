"""Two nodes, each with its own sidecar caching its half of the keys (``--shard-count 2``): every
record of both nodes' epochs is read exactly once across the job's ranks.

The trap (issue B53): a split over the job's world (WebDataset's ``split_by_node``, or a sampler that
splits over ``RANK``/``WORLD_SIZE``) gives each node's ranks every world-th file of *their own* node's
list, so half of each node's files go unread every epoch. Checked on two real ``epochfs sidecar``
mounts over one ``file://`` remote of tar shards, the two nodes' ranks played in turn by this process
with torchrun's variables (2 nodes x 2 ranks): the docs' WebDataset splitting lines run as printed
(docs/layouts/shards.md, docs/shards.md), :func:`rank_shards` alone, and ``EpochSampler``'s default.
"""

from __future__ import annotations

import collections
import os
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fuse_helpers import ROOT
from shards_helpers import tar_members, tar_shard
from sidecar_helpers import running_sidecar

from epochfs.torchclient import EpochDataset, EpochSampler

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]

SHARDS, PER_SHARD, NODES, PER_NODE = 16, 4, 2, 2
LAUNCHERS = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
             "SLURM_NODEID", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "NODE_RANK")


@pytest.fixture(scope="module")
def mounts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Path]]:
    """Two sidecars over the same remote, ``--shard-index`` 0 and 1 of 2: two nodes' mounts."""
    base = tmp_path_factory.mktemp("two_nodes")
    remote = base / "remote" / "shards"
    remote.mkdir(parents=True)
    for s in range(SHARDS):
        (remote / f"train-{s:05d}.tar").write_bytes(tar_shard(s, PER_SHARD))
    for node in range(NODES):
        (base / f"node{node}").mkdir()
    with running_sidecar(base / "node0", remote=f"file://{remote.parent}", endpoint="",
                         extra=("--shard-count", "2", "--shard-index", "0", "--min-samples", "2")) as n0, \
            running_sidecar(base / "node1", remote=f"file://{remote.parent}", endpoint="",
                            extra=("--shard-count", "2", "--shard-index", "1", "--min-samples", "2")) as n1:
        yield [n0.mount, n1.mount]


@pytest.fixture
def node_epochs(mounts: list[Path]) -> Iterator[list[EpochDataset]]:
    """Epoch 0 of each node (its own shards), held while the test reads it."""
    epochs = [EpochDataset(mount, 0, include="*.tar", progress=None, timeout=60) for mount in mounts]
    files = [set(epoch.files) for epoch in epochs]
    assert all(len(f) >= PER_NODE for f in files), "each node's epoch 0 holds a shard per rank"
    assert not files[0] & files[1], "each node holds its own shards"
    yield epochs
    for epoch in epochs:
        epoch.release()


def as_rank(monkeypatch: pytest.MonkeyPatch, node: int, local: int) -> None:
    """This process as torchrun's rank ``local`` of node ``node`` (``--nproc-per-node=2``, 2 nodes)."""
    for name in LAUNCHERS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("RANK", str(node * PER_NODE + local))
    monkeypatch.setenv("WORLD_SIZE", str(NODES * PER_NODE))
    monkeypatch.setenv("LOCAL_RANK", str(local))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(PER_NODE))


def records(epoch: EpochDataset, files: list[str]) -> collections.Counter[str]:
    """The records (tar members' keys, with their node's mount) of ``files`` of ``epoch``."""
    return collections.Counter(f"{epoch.root}:{member.rsplit('.', 1)[0]}"
                               for path in files for member in tar_members(Path(path).read_bytes())
                               if member.endswith(".cls"))


def every_record(epochs: list[EpochDataset]) -> collections.Counter[str]:
    return sum((records(epoch, [str(epoch.path(i)) for i in range(len(epoch))]) for epoch in epochs),
               collections.Counter())


def splitting_lines(page: Path) -> str:
    """The page's WebDataset block's imports and its ``shards = ...`` and ``data = (...)`` statements,
    as printed: the lines that choose which shards a rank reads."""
    fence = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
    [block] = [b for b in fence.findall(page.read_text()) if "webdataset" in b]
    imports = [line for line in block.splitlines() if line.startswith(("import ", "from "))]
    lines = block.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("shards = "))
    end = next(i for i in range(start, len(lines)) if lines[i].rstrip().endswith(".batched(16))"))
    return "\n".join(imports) + "\n" + textwrap.dedent("\n".join(lines[start:end + 1])) + "\n"


@pytest.mark.parametrize("page", ["docs/layouts/shards.md", "docs/shards.md"])
def test_the_docs_webdataset_split_reads_every_record_once_across_nodes(
        page: str, node_epochs: list[EpochDataset], monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("webdataset", reason="webdataset is not installed (pip install 'epochfs[shards]')")
    code = compile(splitting_lines(ROOT / page), page, "exec")
    read: collections.Counter[str] = collections.Counter()
    for node, epoch in enumerate(node_epochs):
        for local in range(PER_NODE):
            as_rank(monkeypatch, node, local)
            ns: dict[str, Any] = {"epoch": epoch}
            exec(code, ns)
            read.update(f"{epoch.root}:{int(label)}" for _, labels in ns["data"] for label in labels)
    # tar_shard's label of record i of shard s is (s + i) % 10: the labels each node's epoch holds.
    expected: collections.Counter[str] = collections.Counter()
    for key in every_record(node_epochs):
        mount, name = key.split(":", 1)
        shard, i = int(name[1:6]), int(name.split("-")[1])
        expected[f"{mount}:{(shard + i) % 10}"] += 1
    assert read == expected, f"{page}: records read across 2 nodes x 2 ranks differ from the nodes' epochs"


def test_rank_shards_gives_each_nodes_shards_to_its_own_ranks(
        node_epochs: list[EpochDataset], monkeypatch: pytest.MonkeyPatch) -> None:
    from epochfs.torchclient import rank_shards

    read: collections.Counter[str] = collections.Counter()
    for node, epoch in enumerate(node_epochs):
        shards = [str(epoch.path(i)) for i in range(len(epoch))]
        for local in range(PER_NODE):
            as_rank(monkeypatch, node, local)
            read += records(epoch, rank_shards(shards))
    assert read == every_record(node_epochs), "a record read twice or never across the job"
    as_rank(monkeypatch, 1, 1)
    assert rank_shards(list(range(8)), partition="global") == [3, 7], "global: every 4th from RANK"


def test_epoch_sampler_default_reads_every_file_of_both_nodes(
        node_epochs: list[EpochDataset], monkeypatch: pytest.MonkeyPatch) -> None:
    seen: collections.Counter[str] = collections.Counter()
    for node, epoch in enumerate(node_epochs):
        for local in range(PER_NODE):
            as_rank(monkeypatch, node, local)
            sampler = EpochSampler(epoch, drop_last=True)  # the defaults, as a user writes it
            sampler.set_epoch(3)
            seen.update(f"{epoch.root}:{epoch.files[i]}" for i in sampler)
    every = {f"{epoch.root}:{name}" for epoch in node_epochs for name in epoch.files}
    # drop_last cuts at most one file of a node with an odd count (local world 2); none is read twice.
    assert set(seen) <= every and max(seen.values()) == 1
    assert len(every) - len(seen) <= sum(len(epoch) % PER_NODE for epoch in node_epochs), \
        f"EpochSampler's default left {len(every) - len(seen)} of {len(every)} files of the two nodes unread"
