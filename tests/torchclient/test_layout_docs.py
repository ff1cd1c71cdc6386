"""docs/layouts/: each page's training code runs, as printed, on a real ``epochfs sidecar``'s mount.

Each page (raw arrays, class folders of images, WebDataset shards) shows how the sidecar is started
for its layout and the shortest code that trains from ``epoch-N/``. Here a ``file://`` remote of that
layout is served by the real sidecar started with the page's own flags (its ``--include``; the
test's own remote, cache, mount, capacity and ``--min-samples``), and every python block of the page
is run as printed, ``EPOCHFS_MOUNT`` (which the blocks read, as the chart sets it) naming the real
mount: the lookups cut the epochs, and what the code trained on is checked against the remote
(issue 22, "A docs page per layout").
"""

from __future__ import annotations

import collections
import contextlib
import io
import os
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import _torchvision
import numpy as np
import pytest
import torch
from fuse_helpers import ROOT
from shards_helpers import tar_shard
from sidecar_helpers import Sidecar, running_sidecar
from test_class_labels_mount import images

from epochfs.sidecar.cli import build_parser

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]

PAGES = ROOT / "docs" / "layouts"
ROOT_LINE = 'root = os.environ.get("EPOCHFS_MOUNT", "/mnt/epochfs")  # the sidecar\'s --mount\n'
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
ARRAYS, CLASSES, PER_CLASS, SHARDS, PER_SHARD = 40, ["ant", "cat", "dog"], 4, 6, 8
# The page's sidecar flags the test replaces with its own: where things are, and sizes for a tiny remote.
OWN = {"--remote", "--cache", "--mount", "--capacity", "--min-samples"}


def blocks(page: str, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall((PAGES / page).read_text()) if lang == language]


def page_flags(page: str) -> list[str]:
    """The flags of the page's one ``epochfs sidecar`` command, less those the test sets itself;
    every flag must be one the CLI has (parsed by the real parser)."""
    [command] = blocks(page, "sh")
    argv = shlex.split(command.replace("\\\n", " "))
    assert argv[:2] == ["epochfs", "sidecar"], argv
    build_parser().parse_args(argv[1:])  # exits (SystemExit) on a flag the CLI does not have
    kept, skip = [], False
    for arg in argv[2:]:
        if skip:
            skip = False
        elif arg in OWN:
            skip = True
        else:
            kept.append(arg)
    return kept


def run(page: str, index: int, mount: Path) -> dict[str, Any]:
    """Run the page's python block ``index`` exactly as printed, with ``EPOCHFS_MOUNT`` (what the
    chart gives a trainer, and what the block reads) naming the real mount."""
    code = blocks(page, "python")[index]
    assert code.count(ROOT_LINE) == 1, f"{page}: block {index} does not set root as the pages do"
    ns: dict[str, Any] = {"__name__": f"docs_layouts_{page[:-3]}"}
    with mock.patch.dict(os.environ, {"EPOCHFS_MOUNT": str(mount)}):
        exec(compile(code, f"docs/layouts/{page}:{index}", "exec"), ns)
    assert ns["root"] == str(mount)
    return ns


@contextlib.contextmanager
def sidecar_over(tmp_path: Path, page: str, objects: dict[str, bytes], min_samples: int) -> Iterator[Sidecar]:
    """The real sidecar over a ``file://`` remote holding ``objects``, with the page's flags."""
    remote = tmp_path / "remote"
    for key, body in objects.items():
        (remote / key).parent.mkdir(parents=True, exist_ok=True)
        (remote / key).write_bytes(body)
    with running_sidecar(
        tmp_path,
        remote=f"file://{remote}",
        endpoint="",
        extra=(*page_flags(page), "--min-samples", str(min_samples), "--capacity", "64Mi"),
    ) as car:
        yield car


def npz(i: int) -> bytes:
    out = io.BytesIO()
    np.savez(out, x=np.full(16, i, np.float32), y=np.int64(i % 2))
    return out.getvalue()


def test_the_arrays_page_trains_on_every_sample_of_each_epoch(tmp_path: Path) -> None:
    assert len(blocks("arrays.md", "python")) == 2, (
        "docs/layouts/arrays.md's snippets changed: update this test"
    )
    objects = {f"train/{i:05d}.npz": npz(i) for i in range(ARRAYS)} | {"README.md": b"# arrays\n"}
    with sidecar_over(tmp_path, "arrays.md", objects, min_samples=ARRAYS) as car:
        ns = run("arrays.md", 0, car.mount)  # EpochLoader, decode="npz"
        history = ns["loader"].history
        assert [(s.epoch, s.files, s.samples, s.complete) for s in history] == [
            (n, ARRAYS, ARRAYS, True) for n in range(3)
        ]
        assert torch.isfinite(ns["loss"]) and ns["batch"]["x"].shape[1:] == (16,)
        ns = run("arrays.md", 1, car.mount)  # ArrayLoader, member x of each .npz
        history = ns["loader"].history
        # A new run on the same mount: start_epoch is the newest epoch the first block left, 2.
        assert [(s.epoch, s.files, s.samples, s.complete) for s in history] == [
            (n, ARRAYS, ARRAYS, True) for n in range(2, 5)
        ]
        assert torch.isfinite(ns["loss"]) and ns["x"].shape[1:] == (16,)


def test_the_images_page_trains_with_the_mounts_labels(tmp_path: Path) -> None:
    assert len(blocks("images.md", "python")) == 2, (
        "docs/layouts/images.md's snippets changed: update this test"
    )
    objects = images(CLASSES, PER_CLASS) | {"val/ant/900.png": images(["ant"], 1)["train/ant/000.png"]}
    with sidecar_over(tmp_path, "images.md", objects, min_samples=len(CLASSES) * PER_CLASS) as car:
        ns = run("images.md", 0, car.mount)
        train = ns["train"]
        assert train.epoch == 2 and len(train) == len(CLASSES) * PER_CLASS  # --include left val/ out
        assert train.class_to_idx == {c: i for i, c in enumerate(CLASSES)}
        assert ns["model"][1].out_features == len(CLASSES)
        assert ns["images"].shape[1:] == (3, 32, 32) and torch.isfinite(ns["loss"])
        # Every image's label is its folder's index, read through the sidecar's mount.
        assert collections.Counter(CLASSES[label] for _, label in train) == dict.fromkeys(CLASSES, PER_CLASS)
        assert all(CLASSES[train[i][1]] == Path(path).parent.name for i, path in enumerate(train.files))


def test_the_images_pages_torchvision_recipe_keeps_the_labels(tmp_path: Path) -> None:
    _torchvision.require()  # imported here, the page's `import torchvision` finds it
    with sidecar_over(tmp_path, "images.md", images(CLASSES, 2), min_samples=len(CLASSES) * 2) as car:
        ns = run("images.md", 1, car.mount)
        assert ns["train"].class_to_idx == {c: i for i, c in enumerate(CLASSES)} and len(ns["train"]) == 6


def test_the_shards_page_trains_on_every_record_of_each_epoch(tmp_path: Path) -> None:
    pytest.importorskip("webdataset", reason="webdataset is not installed (pip install 'epochfs[shards]')")
    assert len(blocks("shards.md", "python")) == 1, (
        "docs/layouts/shards.md's snippet changed: update this test"
    )
    objects = {f"shards/train-{s:05d}.tar": tar_shard(s, PER_SHARD) for s in range(SHARDS)}
    objects |= {"shards/index.json": b"{}", "README.md": b"# shards\n"}
    with sidecar_over(tmp_path, "shards.md", objects, min_samples=SHARDS) as car:
        ns = run("shards.md", 0, car.mount)
        assert ns["n"] == 2 and ns["shards"] == [
            str(car.mount / "epoch-2" / "shards" / f"train-{s:05d}.tar") for s in range(SHARDS)
        ]
        assert ns["images"].shape[1:] == (3, 32, 32) and torch.isfinite(ns["loss"])
        # The last epoch's pipeline read again: every record of every shard once, with its label.
        seen = collections.Counter(
            int(label)
            for _, labels in torch.utils.data.DataLoader(ns["data"], batch_size=None, num_workers=2)
            for label in labels
        )
        assert seen == collections.Counter((s + i) % 10 for s in range(SHARDS) for i in range(PER_SHARD))


@pytest.mark.parametrize("page", ["arrays.md", "images.md", "shards.md"])
def test_each_page_links_to_files_that_exist_and_is_linked(page: str) -> None:
    """tests/deploy/test_docs.py checks docs/*.md; the layout pages are one folder down."""
    text = (PAGES / page).read_text()
    dead = [
        t
        for t in re.findall(r"\]\(([^)\s]+)\)", text)
        if "://" not in t and not t.startswith("#") and not (PAGES / t.split("#", 1)[0]).exists()
    ]
    assert not dead, f"docs/layouts/{page}: dead links {dead}"
    assert f"layouts/{page}" in (ROOT / "docs" / "torchclient.md").read_text()
    assert f"docs/layouts/{page}" in (ROOT / "README.md").read_text()
