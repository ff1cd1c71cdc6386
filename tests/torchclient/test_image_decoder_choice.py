"""Which decoder ``decode="image"`` runs: torchvision.io's where a working torchvision is there,
Pillow otherwise, and Pillow for what torchvision.io does not read (issue 22: "Pillow; torchvision.io
where installed, faster").

The dev environment's torchvision has no working decoder: PyPI's torchvision 0.28.0 (the one for
torch 2.13.0) is built against CUDA torch and its C extension does not load beside the CPU build.
Imported plainly it fails (``RuntimeError: operator torchvision::nms does not exist``); imported as
the tests import it (tests/torchclient/_torchvision.py: its pure-Python parts), torchvision.io
imports but its decoders raise when called. Both must mean Pillow; the second is run here with
that real torchvision. A working torchvision.io is stood up as a small ``torchvision`` package on
the path of a fresh interpreter (the choice is made once per process) whose ``torchvision.io`` has
the three names the decoder uses and records the files it decodes (decoding them with Pillow); the
plain import's failure as one whose ``__init__`` raises as that wheel's does.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

BROKEN = 'raise RuntimeError("operator torchvision::nms does not exist")\n'
WORKING_IO = '''
import enum, json, os
import numpy as np, torch
from PIL import Image

class ImageReadMode(enum.Enum):
    RGB = 3

def read_file(path):
    with open(os.environ["DECODED_LOG"], "a") as log:
        log.write(json.dumps(path) + "\\n")
    return torch.from_numpy(np.fromfile(path, dtype=np.uint8))

def decode_image(data, mode):
    import io
    assert mode is ImageReadMode.RGB
    rgb = Image.open(io.BytesIO(data.numpy().tobytes())).convert("RGB")
    return torch.from_numpy(np.asarray(rgb).transpose(2, 0, 1).copy())
'''

PROBE = '''
import json, sys
from epochfs.torchclient.decode import decode_image, resolve_decoder
decoder = resolve_decoder("image")
print(json.dumps({p: list(decoder(p).shape) for p in sys.argv[1:]}))
'''


REAL = '''
import json, sys
sys.path.insert(0, sys.argv[1])
import _torchvision
_torchvision.torchvision()
import torchvision.io  # imports, with or without the C extension
from epochfs.torchclient.decode import _torchvision_decoder, resolve_decoder
decoder = resolve_decoder("image")
print(json.dumps({"extension": _torchvision.extension_loaded(), "io": _torchvision_decoder() is not None,
                  "pixels": {p: decoder(p).tolist() for p in sys.argv[2:]}}))
'''


def images(folder: Path) -> list[str]:
    """A PNG, a JPEG (grayscale: it comes out as 3 channels) and a BMP (torchvision.io reads no BMP)."""
    pixels = np.arange(5 * 7 * 3, dtype=np.uint8).reshape(5, 7, 3)
    paths = [folder / "a.png", folder / "b.jpg", folder / "c.bmp"]
    Image.fromarray(pixels, "RGB").save(paths[0])
    Image.fromarray(pixels[..., 0], "L").save(paths[1])
    Image.fromarray(pixels, "RGB").save(paths[2])
    return [str(p) for p in paths]


def probe(tmp_path: Path, package: dict[str, str],
          files: list[str]) -> tuple[dict[str, list[int]], list[str]]:
    """Decode ``files`` with ``decode="image"`` in a fresh interpreter that finds ``package``
    (file name -> source) as ``torchvision``; the shapes, and the files torchvision.io read."""
    site = tmp_path / "site"
    (site / "torchvision").mkdir(parents=True)
    for name, source in package.items():
        (site / "torchvision" / name).write_text(source)
    log = tmp_path / "decoded.log"
    log.write_text("")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "DECODED_LOG": str(log)}
    out = subprocess.run([sys.executable, "-c", PROBE, *files], env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    return json.loads(out.stdout), [json.loads(line) for line in log.read_text().splitlines()]


def test_a_working_torchvision_decodes_what_it_reads_and_pillow_the_rest(tmp_path: Path) -> None:
    files = images(tmp_path)
    shapes, decoded = probe(tmp_path, {"__init__.py": "", "io.py": WORKING_IO}, files)
    assert decoded == files[:2]  # PNG and JPEG through torchvision.io; the BMP through Pillow
    assert shapes == {path: [3, 5, 7] for path in files}


def test_a_torchvision_built_for_another_torch_means_pillow(tmp_path: Path) -> None:
    files = images(tmp_path)
    shapes, decoded = probe(tmp_path, {"__init__.py": BROKEN, "io.py": WORKING_IO}, files)
    assert decoded == []
    assert shapes == {path: [3, 5, 7] for path in files}


def test_the_dev_environments_torchvision_decodes_with_pillow_when_its_extension_is_missing(
        tmp_path: Path) -> None:
    """The real torchvision, as the tests import it: where its C extension did not load, its
    torchvision.io imports but cannot decode, and ``decode="image"`` must not pick it (each image
    would fail); where the extension loaded, torchvision.io decodes. The pixels are Pillow's (the
    JPEG's exactly only where Pillow decoded it: another JPEG decoder may round otherwise)."""
    if importlib.util.find_spec("torchvision") is None:  # not importorskip: a plain import may fail
        pytest.skip("torchvision is not installed (pip install 'epochfs[dev]')")
    files = images(tmp_path)
    out = subprocess.run([sys.executable, "-c", REAL, str(Path(__file__).parent), *files],
                         capture_output=True, text=True, timeout=120, check=True)
    result = json.loads(out.stdout)
    assert result["io"] == result["extension"]
    for path in files:
        with Image.open(path) as img:
            want = torch.from_numpy(np.array(img.convert("RGB"))).permute(2, 0, 1)
        got = torch.tensor(result["pixels"][path], dtype=torch.uint8)
        assert got.shape == want.shape == (3, 5, 7), path
        assert torch.equal(got, want) or (result["io"] and path.endswith(".jpg")), path
