"""docs/layouts/: each page's training code runs on a kept cache, whose epoch 0 has retired.

Epoch numbers are never reused, so a cache that outlives its trainer (a hostPath cache a new pod
opens warm) holds epochs 6 and 7, say, and no epoch 0 ever again: a loop that starts at 0 fails at
its first lookup (``not live``). The pages' loops start at ``start_epoch(root)``, as
docs/torchclient.md's do. A real ``epochfs sidecar`` with the page's flags fills the cache and cuts
epochs until epoch 0 retires, then stops; a second starts on the same cache, as the replacement
pod's does, and every python block of the page runs as printed on its mount
(tests/torchclient/test_layout_docs.py runs them on a new cache).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import _torchvision
import pytest
import test_layout_docs as layout
import torch
from common import wait_until
from shards_helpers import tar_shard
from sidecar_helpers import running_sidecar
from test_class_labels_mount import images

from epochfs.torchclient.layout import list_epochs, read_status

pytestmark = layout.pytestmark

RETIRE_QUICKLY = ("--keep-epochs", "1", "--in-use-seconds", "1", "--retire-grace", "1")
"""The first sidecar's settings: only the newest epoch pinned, so epoch 0 retires once newer ones
are cut."""
CUTS = 3
NEWEST = CUTS - 1


def _live(mount: Path) -> list[int]:
    return [int(e["epoch"]) for e in (read_status(mount) or {}).get("epochs") or []]


def _write_remote(tmp_path: Path, objects: dict[str, bytes]) -> str:
    remote = tmp_path / "remote"
    for key, body in objects.items():
        (remote / key).parent.mkdir(parents=True, exist_ok=True)
        (remote / key).write_bytes(body)
    return f"file://{remote}"


def _kept_cache(tmp_path: Path, page: str, objects: dict[str, bytes], samples: int) -> str:
    """Fill the cache with the page's flags, cut epochs 0 to :data:`NEWEST` and wait until epoch 0
    has retired; the sidecar is stopped before this returns. Returns the remote."""
    remote = _write_remote(tmp_path, objects)
    flags = (*layout.page_flags(page), "--min-samples", str(samples), "--capacity", "64Mi")
    with running_sidecar(tmp_path, remote=remote, endpoint="", extra=(*flags, *RETIRE_QUICKLY)) as car:
        wait_until(lambda: (read_status(car.mount) or {}).get("samples", 0) >= samples, timeout=60,
                   what="every sample cached")
        for _ in range(CUTS):
            subprocess.run([sys.executable, "-m", "epochfs.sidecar.cli", "--log-level", "WARNING", "cut",
                            "--cache", str(car.cache)], check=True, capture_output=True, timeout=60)
        wait_until(lambda: _live(car.mount) and min(_live(car.mount)) > 0 and _live(car.mount)[-1] == NEWEST
                   and 0 not in list_epochs(car.mount), timeout=60, what="epoch 0 retired")
    return remote


def _run_kept(tmp_path: Path, page: str, objects: dict[str, bytes], samples: int,
              index: int) -> dict[str, Any]:
    """The page's python block ``index`` run on the kept cache's second sidecar (the page's flags,
    default retention)."""
    remote = _kept_cache(tmp_path, page, objects, samples)
    flags = (*layout.page_flags(page), "--min-samples", str(samples), "--capacity", "64Mi")
    with running_sidecar(tmp_path, remote=remote, endpoint="", extra=flags) as car:
        assert 0 not in list_epochs(car.mount) and _live(car.mount)[-1] == NEWEST
        return layout.run(page, index, car.mount)


def test_the_arrays_page_starts_at_the_newest_epoch_of_a_kept_cache(tmp_path: Path) -> None:
    objects = {f"train/{i:05d}.npz": layout.npz(i) for i in range(layout.ARRAYS)}
    ns = _run_kept(tmp_path, "arrays.md", objects, layout.ARRAYS, 0)
    assert [s.epoch for s in ns["loader"].history] == [NEWEST, NEWEST + 1, NEWEST + 2]
    assert torch.isfinite(ns["loss"])


def test_the_images_page_starts_at_the_newest_epoch_of_a_kept_cache(tmp_path: Path) -> None:
    count = len(layout.CLASSES) * layout.PER_CLASS
    ns = _run_kept(tmp_path, "images.md", images(layout.CLASSES, layout.PER_CLASS), count, 0)
    assert ns["train"].epoch == NEWEST + 2 and len(ns["train"]) == count
    assert ns["model"][1].out_features == len(layout.CLASSES) and torch.isfinite(ns["loss"])


def test_the_images_pages_torchvision_recipe_on_a_kept_cache(tmp_path: Path) -> None:
    _torchvision.require()
    count = len(layout.CLASSES) * 2
    ns = _run_kept(tmp_path, "images.md", images(layout.CLASSES, 2), count, 1)
    assert ns["epoch"].epoch == NEWEST and len(ns["train"]) == count


def test_the_shards_page_starts_at_the_newest_epoch_of_a_kept_cache(tmp_path: Path) -> None:
    pytest.importorskip("webdataset", reason="webdataset is not installed (pip install 'epochfs[shards]')")
    objects = {f"shards/train-{s:05d}.tar": tar_shard(s, layout.PER_SHARD) for s in range(layout.SHARDS)}
    ns = _run_kept(tmp_path, "shards.md", objects, layout.SHARDS, 0)
    assert ns["n"] == NEWEST + 2 and torch.isfinite(ns["loss"])
    assert all(os.path.basename(os.path.dirname(os.path.dirname(s))) == f"epoch-{NEWEST + 2}"
               for s in ns["shards"])
