"""docs/torchclient.md's "4. Lightning" command, run as printed, prints what the page shows.

The command failed in the repo's venv (``RuntimeError: operator torchvision::nms does not exist``
from ``import lightning``: a CUDA torchvision beside the CPU torch) while the page showed it
succeed; the example's test passed only because it imported torchvision its own way first. Here
the page's command runs in a fresh process from the repository root, nothing imported before it
(issue B53, 4a).
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def documented() -> tuple[list[str], list[str]]:
    """The command of "### 4. Lightning" and the lines the page shows after its ``...``."""
    page = (ROOT / "docs" / "torchclient.md").read_text()
    section = page.split("### 4. Lightning", 1)[1]
    block = re.search(r"^```\n(.*?)^```", section, re.S | re.M)
    assert block, "docs/torchclient.md: the Lightning section has no output block"
    lines = block.group(1).splitlines()
    assert lines[0].startswith("$ ") and lines[1] == "...", lines[:2]
    return shlex.split(lines[0][2:]), lines[2:]


@pytest.mark.long
def test_the_documented_lightning_command_runs_as_printed() -> None:
    if importlib.util.find_spec("lightning") is None:
        pytest.skip("lightning is not installed (pip install lightning)")
    argv, shown = documented()
    assert argv == [".venv/bin/python", "examples/lightning_datamodule.py"], argv
    if not (ROOT / argv[0]).exists():  # another environment than the repo's venv: its interpreter
        argv[0] = sys.executable
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"{' '.join(argv)} failed:\n{done.stderr[-3000:]}"
    out = (done.stdout + done.stderr).splitlines()
    missing = [line for line in shown if line not in out]
    assert not missing, f"the page's lines {missing} are not in the output:\n{out[-10:]}"
    assert done.stdout.splitlines()[-3:] == shown[-3:]
