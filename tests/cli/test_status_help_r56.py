"""What a new user reads from ``epochfs status`` and ``--help``, checked through the real console
script:

- ``epochfs status --cache`` on a cache it may only read (the trainer container's read-only
  mount of it, ``EPOCHFS_CACHE``): SQLite writes beside the index even to read it, so it is
  refused, but the one line points at ``--mount`` (the view's status.json), which works there;
- ``--mount``'s help says what the check does (a missing folder is made only where its parent
  exists), and ``status --help`` lists ``--interval``'s default, as every flag's default is listed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from readonly_helpers import read_only_view

from epochfs.sidecar.store import Policy, Store

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
IS_ROOT = os.geteuid() == 0


def _run(args: list[str], prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    env["COLUMNS"] = "200"  # one help entry a line
    return subprocess.run([*prefix, EPOCHFS, *args], capture_output=True, text=True, env=env, timeout=60)


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def _cache(path: Path) -> Path:
    with Store(path, create=True) as store:
        store.configure(Policy(capacity=1 << 20))
    return path


@pytest.fixture
def read_only_cache(tmp_path: Path) -> Iterator[Path]:
    """A real cache seen through a read-only bind mount (root only)."""
    source = _cache(tmp_path / "source" / "cache")
    with read_only_view(source.parent, tmp_path / "ro") as ro:
        yield ro / "cache"


@pytest.mark.skipif(not IS_ROOT, reason="a read-only bind mount needs root")
def test_status_on_a_read_only_cache_points_at_mount(read_only_cache: Path) -> None:
    line = _one_line(_run(["status", "--cache", str(read_only_cache)]))
    assert line.startswith(f"epochfs status: --cache {read_only_cache}: cannot write in it: "
                           "read-only file system"), line
    assert "epochfs status --mount" in line and "status.json" in line, line


def test_status_on_a_cache_it_may_not_write_points_at_mount(tmp_path: Path) -> None:
    prefix: tuple[str, ...] = ()
    if IS_ROOT:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("needs setpriv to drop root's file-mode override")
        prefix = (setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--")
    cache = _cache(tmp_path / "cache")
    cache.chmod(0o555)
    try:
        line = _one_line(_run(["status", "--cache", str(cache)], prefix))
    finally:
        cache.chmod(0o755)
    assert "cannot write in it: permission denied" in line, line
    assert "epochfs status --mount" in line, line


def _help_entry(command: str, flag: str) -> str:
    """The help text of ``flag`` in ``epochfs COMMAND --help``, its wrapped lines joined."""
    out = _run([command, "--help"]).stdout
    match = re.search(rf"^  {re.escape(flag)}\b.*?(?=^  -|\Z)", out, re.M | re.S)
    assert match is not None, out
    return " ".join(match.group(0).split())


def test_status_help_lists_the_interval_default() -> None:
    assert "(default 2)" in _help_entry("status", "--interval")


@pytest.mark.parametrize("command", ["sidecar", "mount", "publish"])
def test_mount_help_says_the_parent_must_exist(command: str, tmp_path: Path) -> None:
    text = _help_entry(command, "--mount")
    assert "created when missing if its parent exists" in text, text
    assert "created if missing" not in text, text
