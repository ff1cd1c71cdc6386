"""Running ``epochfs bench`` as a user would: the console script, from a folder outside the checkout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


EPOCHFS = Path(sys.executable).with_name("epochfs")


def bench(*args: str, cwd: Path, env: dict[str, str] | None = None,
          timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(EPOCHFS), "bench", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def decoy(folder: Path) -> Path:
    """A folder outside the checkout with an ``epochfs`` package in it that must never be imported."""
    (folder / "epochfs").mkdir(parents=True)
    (folder / "epochfs" / "__init__.py").write_text("raise SystemExit('the decoy epochfs was imported')\n")
    return folder
