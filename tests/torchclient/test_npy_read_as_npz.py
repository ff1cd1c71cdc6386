"""``.npy`` samples meet the README's loader, and ``decode="npz"`` names the decoder that reads them.

Why: the README's training block passed ``decode="npz"``; copied onto a folder of ``.npy`` files (the
layout docs/torchclient.md's first block reads) every batch failed with "is not a readable .npz
(zip) file", and the message did not say which decoder would read the file. The block now keeps
the default ``"auto"`` (by extension), and the npz decoder's refusal of a ``.npy`` name says
``decode='npy' or 'auto'`` (ArrayLoader's ``format=`` likewise). Plain folders published like the
mount (``publish_epoch``), no sidecar.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from epochfs.torchclient import ArraySampleError, EpochLoader
from epochfs.torchclient.plainfolder import publish_epoch

README = Path(__file__).resolve().parents[2] / "README.md"


def _publish(tmp_path: Path, suffix: str) -> Path:
    """Epoch 0 of four float32 samples ``train/i<suffix>`` (``.npy``, or ``.npz`` holding ``x``)."""
    files: dict[str, Path] = {}
    for i in range(4):
        path = tmp_path / "objects" / f"train/{i}{suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        if suffix == ".npy":
            np.save(path, np.full(3, i, np.float32))
        else:
            np.savez(path, x=np.full(3, i, np.float32))
        files[f"train/{i}{suffix}"] = path
    root = tmp_path / f"mnt{suffix.replace('.', '-')}"
    publish_epoch(root, 0, files)
    return root


def _readme_decode() -> object:
    """The ``decode`` the README's training block gives ``EpochLoader`` (its default where none)."""
    blocks = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.S | re.M)
    for block in blocks:
        for node in ast.walk(ast.parse(block)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "EpochLoader":
                given = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg == "decode"}
                return given.get("decode", "auto")
    raise AssertionError("no EpochLoader call in the README's python blocks")


@pytest.mark.parametrize("suffix", [".npy", ".npz"])
def test_the_readme_loader_reads_both_array_layouts(tmp_path: Path, suffix: str) -> None:
    root = _publish(tmp_path, suffix)
    decode = _readme_decode()
    with EpochLoader(root, batch_size=2, num_workers=0, decode=decode, shuffle=False,  # type: ignore[arg-type]
                     report=False, progress=None) as loader:
        batches = list(loader.epoch(0))
    assert len(batches) == 2


def test_npz_decoding_of_a_npy_file_names_the_decoders_that_read_it(tmp_path: Path) -> None:
    root = _publish(tmp_path, ".npy")
    with EpochLoader(root, batch_size=2, num_workers=0, decode="npz", shuffle=False, report=False,
                     progress=None) as loader, pytest.raises(ArraySampleError) as caught:
        list(loader.epoch(0))
    text = str(caught.value)
    assert "is not a readable .npz (zip) file" in text, text
    assert "the name ends in .npy: pass decode='npy' or 'auto'" in text, text


def test_arrayloader_npz_format_on_a_npy_file_names_the_formats_that_read_it(tmp_path: Path) -> None:
    from epochfs.torchclient import ArrayLoader

    root = _publish(tmp_path, ".npy")
    with ArrayLoader(root, batch_size=2, shuffle=False, num_threads=1, report=False, progress=None,
                     format="npz") as loader, pytest.raises(ArraySampleError) as caught:
        list(loader.epoch(0))
    text = str(caught.value)
    assert "is not a readable .npz (zip) file" in text, text
    assert "the name ends in .npy: pass format='npy' or 'auto'" in text, text
