"""docs/shards.md's Hugging Face ``imagefolder`` snippet gives ``(3, H, W)`` uint8 for every PNG.

The page promised ``(3, H, W)``, but ``datasets`` keeps an image's own channels: RGBA PNGs came out
``(4, H, W)`` and grayscale ones ``(1, H, W)``, and a batch of mixed PNGs does not stack. The
snippet now declares ``Image(mode="RGB")``; this runs it, as the page has it, on a real mount whose
class folders hold RGB, RGBA, grayscale and palette PNGs. The cache is filled through the Store API
as the sampler fills it (tests/fuse_helpers.py) and served by ``epochfs mount`` for real.
"""

from __future__ import annotations

import collections
import io
import os
from pathlib import Path

import numpy as np
import pytest
from fuse_helpers import admit, mounted, open_store
from PIL import Image
from test_docs_shards import need, run

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]

MODES = {"RGB": 3, "RGBA": 4, "L": 1, "P": 1}
"""Pillow's mode -> the channels ``datasets`` gives such a PNG without a mode of its own."""


def png(mode: str, width: int) -> bytes:
    pixels = np.arange(6 * width * 4, dtype=np.uint8).reshape(6, width, 4)
    if mode == "RGBA":
        image = Image.fromarray(pixels, "RGBA")
    else:  # from RGB: a palette made from RGBA carries a transparency Pillow warns about
        image = Image.fromarray(pixels[..., :3]).convert(mode)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def test_every_image_of_the_snippet_has_three_channels(tmp_path: Path) -> None:
    datasets = need("datasets")
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache)
    admit(store, {f"train/{cls}/{mode}.png": png(mode, 5 + i)
                  for cls in ("ant", "cat") for i, mode in enumerate(MODES)})
    store.cut(0)
    with mounted(cache, mnt):
        ns = run(2, mnt, 0)
        shapes = collections.Counter((tuple(e["image"].shape), str(e["image"].dtype)) for e in ns["data"])
        assert shapes == {((3, 6, 5 + i), "torch.uint8"): 2 for i in range(len(MODES))}
        # What the page says a bare Image() gives instead: each PNG's own channels.
        bare = datasets.load_dataset("imagefolder", data_files=[str(ns["epoch"].path(i))
                                                                for i in range(len(ns["epoch"]))],
                                     split="train", streaming=True).with_format("torch")
        channels = sorted(int(e["image"].shape[0]) for e in bare)
        assert channels == sorted(2 * list(MODES.values()))
    store.close()
