#!/usr/bin/env python3
"""Create ``.tools/checkov-venv`` with a pinned checkov and print the path of its ``checkov``.

checkov pins older boto3/botocore, packaging and networkx than the project (s3fs/aiobotocore and
torch need newer ones), so it cannot share ``.venv``; it gets its own virtual environment under
the git-ignored ``.tools/``. Tests and ``make`` call this script; a second run only prints the path.

Usage: ``python scripts/get-checkov.py [--tools DIR]``
"""

from __future__ import annotations

import argparse
import fcntl
import shutil
import subprocess
import sys
from pathlib import Path

CHECKOV = "checkov==3.3.30"
ROOT = Path(__file__).resolve().parent.parent


def _works(binary: Path) -> bool:
    try:
        out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == CHECKOV.split("==")[1]


def fetch(tools: Path) -> Path:
    """Make sure ``tools/checkov-venv/bin/checkov`` exists at the pinned version; return it."""
    venv = tools / "checkov-venv"
    binary = venv / "bin" / "checkov"
    if _works(binary):
        return binary
    tools.mkdir(parents=True, exist_ok=True)
    with (tools / ".get-checkov.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _works(binary):
            return binary
        shutil.rmtree(venv, ignore_errors=True)
        # The base interpreter, not .venv's: a venv made from inside another venv still works, but
        # naming the base keeps the two environments independent.
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
             "--disable-pip-version-check", CHECKOV],
            check=True,
        )
    if not _works(binary):
        raise SystemExit(f"get-checkov: {binary} does not run after installing {CHECKOV}")
    return binary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tools", type=Path, default=ROOT / ".tools", help="cache folder (default .tools)")
    ns = parser.parse_args(argv)
    print(fetch(ns.tools.resolve()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
