"""``decode="image"`` says once, in the log, why torchvision.io does not decode.

Pillow stands in for torchvision.io whenever the latter cannot decode (tests/torchclient/
test_image_decoder_choice.py checks the choice); a user who installed torchvision for its faster
decoders learns from one INFO line of each process that they are not used, and why. Without
torchvision at all the line is DEBUG: nothing was expected of it. Each case runs in a fresh
interpreter (the choice is made once per process) that decodes several images, with the log on
stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from test_image_decoder_choice import BROKEN, WORKING_IO, images

SCRIPT = '''
import logging, sys
if sys.argv[1] == "absent":
    sys.modules["torchvision"] = None  # what an environment without torchvision imports
logging.basicConfig(level=logging.DEBUG, format="%(levelname)s %(name)s %(message)s", stream=sys.stderr)
from epochfs.torchclient.decode import resolve_decoder
decoder = resolve_decoder("image")
for path in sys.argv[2:]:
    decoder(path)
'''


def pillow_lines(tmp_path: Path, package: dict[str, str], case: str = "package") -> list[str]:
    """The log lines about the decoder choice of a process that decodes three images, with
    ``package`` (file name -> source) found first as ``torchvision``."""
    site = tmp_path / "site"
    (site / "torchvision").mkdir(parents=True)
    for name, source in package.items():
        (site / "torchvision" / name).write_text(source)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "DECODED_LOG": str(tmp_path / "decoded.log")}
    files = images(tmp_path)
    out = subprocess.run([sys.executable, "-c", SCRIPT, case, *files, *files], env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    return [line for line in out.stderr.splitlines() if "decoded by Pillow" in line]


def test_a_broken_torchvision_is_named_once_at_info(tmp_path: Path) -> None:
    lines = pillow_lines(tmp_path, {"__init__.py": BROKEN, "io.py": WORKING_IO})
    assert len(lines) == 1, lines
    assert lines[0].startswith("INFO epochfs.torchclient ")
    assert "RuntimeError: operator torchvision::nms does not exist" in lines[0]


def test_decoders_that_fail_are_named_once_at_info(tmp_path: Path) -> None:
    failing = WORKING_IO.replace("def decode_image(data, mode):",
                                 "def decode_image(data, mode):\n"
                                 "    raise RuntimeError(\"Couldn't load the image extension\")")
    lines = pillow_lines(tmp_path, {"__init__.py": "", "io.py": failing})
    assert len(lines) == 1, lines
    assert lines[0].startswith("INFO ")
    assert "torchvision.io cannot decode (RuntimeError: Couldn't load the image extension)" in lines[0]


def test_no_torchvision_is_a_debug_line(tmp_path: Path) -> None:
    lines = pillow_lines(tmp_path, {"__init__.py": ""}, case="absent")
    assert len(lines) == 1, lines
    assert lines[0].startswith("DEBUG ")
    assert "torchvision is not installed" in lines[0]


def test_a_working_torchvision_logs_no_fallback(tmp_path: Path) -> None:
    assert pillow_lines(tmp_path, {"__init__.py": "", "io.py": WORKING_IO}) == []
