"""A trainer whose name starts with ``epochfs-`` is a reader: its opens are served samples.

The served-opens filter left out every process whose name began with ``epochfs-``, so a user's
``./epochfs-train.py`` (comm ``epochfs-train.p``) was never counted (reviewer J2.2). Only the
names epochfs itself gives its processes are its own: the console script ``epochfs`` and the
listing process's ``epochfs-listing``, matched exactly.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from epochfs.sidecar.listing.child import NAME
from epochfs.sidecar.served import OWN_NAMES, OwnProcesses


@pytest.fixture
def stranger() -> Iterator[int]:
    """A process that is not an ancestor of the ones the test starts: the watcher's root, so that
    they are judged by name and command line, not as its descendants."""
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        yield proc.pid
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()


def _run_named(script: Path) -> subprocess.Popen[bytes]:
    """Start ``script`` (its name becomes the process's comm) and wait until it has started."""
    proc = subprocess.Popen([str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait()


def test_a_user_script_named_epochfs_something_is_counted(tmp_path: Path, stranger: int) -> None:
    script = tmp_path / "epochfs-train.py"
    script.write_text(f"#!{sys.executable}\nimport sys\nprint('ready', flush=True)\nsys.stdin.read()\n")
    script.chmod(0o755)
    trainer = _run_named(script)
    try:
        comm = Path(f"/proc/{trainer.pid}/comm").read_text().strip()
        assert comm == "epochfs-train.p"
        assert not OwnProcesses(root=stranger).ours(trainer.pid), "a user's trainer is a reader"
    finally:
        _stop(trainer)


def test_the_listing_process_is_still_epochfs_by_its_name(tmp_path: Path, stranger: int) -> None:
    assert os.fsdecode(NAME) in OWN_NAMES
    code = ("import ctypes, sys\n"
            f"ctypes.CDLL(None).prctl(15, {NAME!r})\n"  # PR_SET_NAME, as the listing process does
            "print('ready', flush=True)\nsys.stdin.read()\n")
    listing = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert listing.stdout is not None
    assert listing.stdout.readline() == b"ready\n"
    try:
        assert Path(f"/proc/{listing.pid}/comm").read_text().strip() == os.fsdecode(NAME)
        assert OwnProcesses(root=stranger).ours(listing.pid)
    finally:
        _stop(listing)
