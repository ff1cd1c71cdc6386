"""A folder seen read-only through a bind mount, for the refusals of a cache on a read-only file
system (root only: a bind mount needs CAP_SYS_ADMIN)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from epochfs.fuse.mounting import lazy_unmount


@contextlib.contextmanager
def read_only_view(source: Path, target: Path) -> Iterator[Path]:
    """``source`` seen read-only at ``target`` (made here) for a ``with`` block; skips the test
    where the bind mount cannot be made."""
    target.mkdir()
    made = subprocess.run(["mount", "--bind", "-o", "ro", str(source), str(target)],
                          capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {made.stderr.strip()}")
    try:
        if os.access(target, os.W_OK):  # an older mount(8) ignores ro on the first call
            subprocess.run(["mount", "-o", "remount,bind,ro", str(target)], check=True)
        yield target
    finally:
        lazy_unmount(target, any_kind=True)
