"""docs/shards.md: every snippet runs, in order, on a real mount, and reads every record of every shard.

The cache is filled through the Store API as the sampler fills it (tests/fuse_helpers.py) with
WebDataset tar shards, Parquet files, class folders of PNGs and other files; ``epochfs mount``
serves it for real. Each library's test is skipped, naming it, where it is not installed.
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import os
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from fuse_helpers import ROOT, Mount, admit, mounted, open_store
from shards_helpers import parquet_shard, tar_shard
from test_class_labels_mount import images

from epochfs.sidecar.store import Store
from epochfs.sidecar.store.listings import Part

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]

PER_TAR, TARS, ROWS, PARQUETS = 16, 6, 100, 4
INSTALL = "pip install 'epochfs[shards]'"


def need(module: str) -> Any:
    return pytest.importorskip(module, reason=f"{module} is not installed ({INSTALL})")


def snippets() -> list[str]:
    found = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "shards.md").read_text(), flags=re.S)
    assert len(found) == 4, "docs/shards.md's snippets changed: update this test"
    return found


def run(index: int, root: Path, n: int, **names: Any) -> dict[str, Any]:
    ns: dict[str, Any] = {"root": str(root), "n": n, **names}
    exec(compile(snippets()[index], f"docs/shards.md:snippet{index}", "exec"), ns)
    return ns


def expected_labels(shards: range) -> collections.Counter[int]:
    return collections.Counter((s + i) % 10 for s in shards for i in range(PER_TAR))


@contextlib.contextmanager
def shard_mount(tmp_path: Path) -> Iterator[tuple[Mount, Store]]:
    """Epoch 0: TARS tar shards, PARQUETS Parquet files, train/{ant,cat,dog} (1, 2, 3 images; the
    listing's discovery also named bee, absent from the epoch), a README and a shard index."""
    cache = tmp_path / "cache"
    store = open_store(cache)
    discovered = ["ant", "bee", "cat", "dog"]
    store.listings().begin([Part(i, f"train/{c}/", "", None) for i, c in enumerate(discovered)], "list")
    objects = {f"shards/train-{s:05d}.tar": tar_shard(s, PER_TAR) for s in range(TARS)}
    if importlib.util.find_spec("pyarrow") is not None:  # the Parquet tests skip without it
        objects |= {f"parquet/part-{s:05d}.parquet": parquet_shard(s, ROWS) for s in range(PARQUETS)}
    objects |= images(["ant"], 1) | images(["cat"], 2, start=10) | images(["dog"], 3, start=20)
    objects |= {"README.md": b"# a dataset\n", "shards/index.json": b"{}"}
    admit(store, objects)
    store.cut(0)
    try:
        with mounted(cache, tmp_path / "mnt") as m:
            yield m, store
    finally:
        store.close()


def test_the_webdataset_snippet_trains_on_every_record_of_each_epoch(tmp_path: Path) -> None:
    need("webdataset")
    with shard_mount(tmp_path) as (m, store):
        ns = run(0, m.path, 0)
        assert ns["shards"] == [str(m.path / "epoch-0" / "shards" / f"train-{s:05d}.tar")
                                for s in range(TARS)]
        assert ns["images"].shape[1:] == (3, 32, 32) and torch.isfinite(ns["loss"])
        seen = [label for _, labels in torch.utils.data.DataLoader(ns["data"], batch_size=None, num_workers=2)
                for label in labels.tolist()]
        assert collections.Counter(seen) == expected_labels(range(TARS))  # every record of every shard once
        # Epoch 1: two more shards fetched; its lookup (the snippet's EpochDataset) cuts it.
        admit(store, {f"shards/train-{s:05d}.tar": tar_shard(s, PER_TAR) for s in range(TARS, TARS + 2)})
        ns = run(0, m.path, 1)
        assert len(ns["shards"]) == TARS + 2
        seen = [label for _, labels in torch.utils.data.DataLoader(ns["data"], batch_size=None, num_workers=2)
                for label in labels.tolist()]
        assert collections.Counter(seen) == expected_labels(range(TARS + 2))


def test_webdataset_refuses_fewer_shards_than_workers(tmp_path: Path) -> None:
    """docs/shards.md's reason for many shards per epoch: a worker without a shard fails the epoch."""
    wds = need("webdataset")
    with shard_mount(tmp_path) as (m, _store):
        data = wds.WebDataset([str(m.path / "epoch-0" / "shards" / "train-00000.tar")], shardshuffle=False)
        with pytest.raises(ValueError, match="fewer shards than workers"):
            for _ in torch.utils.data.DataLoader(data.decode("torchrgb").to_tuple("png", "cls"),
                                                 batch_size=None, num_workers=2):
                pass


@pytest.mark.long
def test_the_datasets_parquet_snippet_streams_every_row_without_a_copy(tmp_path: Path) -> None:
    datasets = need("datasets")
    with shard_mount(tmp_path) as (m, _store):
        ns = run(1, m.path, 0)
        assert len(ns["files"]) == PARQUETS and torch.isfinite(ns["loss"])
        assert ns["batch"]["features"].shape[1:] == (8,)
        rows = [r for batch in torch.utils.data.DataLoader(ns["data"], batch_size=64, num_workers=2)
                for r in batch["row"].tolist()]
        assert sorted(rows) == [s * 1_000_000 + i for s in range(PARQUETS) for i in range(ROWS)]
        # The page's warning: without streaming=True, load_dataset copies the epoch into its cache.
        streamed, copied = tmp_path / "hf-streamed", tmp_path / "hf-copied"
        stream = datasets.load_dataset("parquet", data_files=ns["files"], split="train", streaming=True,
                                       cache_dir=str(streamed))
        assert sum(1 for _ in stream) == PARQUETS * ROWS
        assert not list(streamed.rglob("*.arrow"))
        table = datasets.load_dataset("parquet", data_files=ns["files"], split="train", cache_dir=str(copied))
        assert len(table) == PARQUETS * ROWS
        assert [Path(f["filename"]).is_relative_to(copied) for f in table.cache_files] == [True]
        # Fewer files than workers: datasets stops the extra workers, every row is still read once.
        one = datasets.load_dataset("parquet", data_files=ns["files"][:1], split="train",
                                    streaming=True).with_format("torch")
        assert one.num_shards == 1
        rows = [r for batch in torch.utils.data.DataLoader(one, batch_size=64, num_workers=2)
                for r in batch["row"].tolist()]
        assert sorted(rows) == list(range(ROWS))


def test_the_imagefolder_snippet_keeps_the_mounts_labels(tmp_path: Path) -> None:
    datasets = need("datasets")
    with shard_mount(tmp_path) as (m, _store):
        ns = run(2, m.path, 0)
        assert ns["classes"] == ["ant", "bee", "cat", "dog"]  # bee: named by the listing, not in epoch 0
        image = ns["image"]
        assert image.dtype == torch.uint8 and image.ndim == 3 and image.shape[0] == 3
        counts = collections.Counter(int(example["label"]) for example in ns["data"])
        assert counts == {0: 1, 2: 2, 3: 3}  # ant, cat, dog by classes.json
        # Without the features: imagefolder numbers the folders of this epoch, cat and dog move.
        plain = datasets.load_dataset("imagefolder", data_files=[str(ns["epoch"].path(i))
                                                                 for i in range(len(ns["epoch"]))],
                                      split="train", streaming=True)
        assert collections.Counter(int(example["label"]) for example in plain) == {0: 1, 1: 2, 2: 3}


def test_the_pyarrow_snippet_reads_every_row(tmp_path: Path) -> None:
    need("pyarrow")
    with shard_mount(tmp_path) as (m, _store):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the page says torch.tensor avoids from_numpy's warning
            ns = run(3, m.path, 0)
        assert ns["x"].shape[1:] == (8,) and torch.isfinite(ns["loss"])
        rows = [r for batch in ns["table"].to_batches(columns=["row"]) for r in batch["row"].to_pylist()]
        assert sorted(rows) == [s * 1_000_000 + i for s in range(PARQUETS) for i in range(ROWS)]
        assert ns["epoch"].excluded > 0  # the tar shards, images, README and index beside them
