"""docs/torchclient.md, "Class folders of images": every snippet runs, in order, on a real mount."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import _torchvision
import pytest
from fuse_helpers import ROOT, admit, mounted, open_store
from test_class_labels_mount import images

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]


def snippets() -> list[str]:
    text = (ROOT / "docs" / "torchclient.md").read_text()
    section = text.split("## Class folders of images", 1)[1].split("\n## ", 1)[0]
    found = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(found) == 4, "the section's snippets changed: update this test"
    return found


def mounted_images(tmp_path: Path) -> Any:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache)
    admit(store, images(["ant", "cat", "dog"], 4) | images(["cat", "dog", "ant"], 2, start=40, folder="val"))
    store.cut(0)
    store.close()
    return mounted(cache, mnt)


def test_the_image_folder_snippets_run_on_a_mount(tmp_path: Path) -> None:
    code = snippets()
    with mounted_images(tmp_path) as m:
        ns: dict[str, Any] = {"root": str(m.path), "n": 0}
        exec(compile(code[0], "docs/torchclient.md:EpochImageFolder", "exec"), ns)
        assert ns["train"].class_to_idx == {"ant": 0, "cat": 1, "dog": 2}
        assert ns["loss"].item() > 0 and ns["images"].shape[1:] == (3, 64, 64)
        exec(compile(code[1], "docs/torchclient.md:EpochLoader", "exec"), ns)
        assert ns["loader"].history[-1].samples == 12 and not ns["labels"].dtype.is_floating_point
        exec(compile(code[2], "docs/torchclient.md:val", "exec"), ns)
        assert ns["val"].class_to_idx == ns["train"].class_to_idx and len(ns["val"]) == 6


def test_the_torchvision_recipe_runs_on_a_mount(tmp_path: Path) -> None:
    _torchvision.require()  # imported here, the snippet's `import torchvision` finds it
    with mounted_images(tmp_path) as m:
        ns: dict[str, Any] = {"root": str(m.path), "n": 0}
        exec(compile(snippets()[3], "docs/torchclient.md:ImageFolder", "exec"), ns)
        assert ns["train_tv"].class_to_idx == {"ant": 0, "cat": 1, "dog": 2}
