"""``epochfs status --mount`` given a cache folder says to pass it as ``--cache``.

Why: mixing up ``--cache`` and ``--mount`` is a first-hour mistake, and ``status --mount <cache>``
said only "is not an epochfs mount (no status.json)", though the folder is recognisably a cache
(it holds the index). The one line now names the flag that reads it; a folder that is neither keeps
the plain refusal. A real store's cache, through the real console script.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from epochfs.sidecar.store import Policy, Store

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
HINT = "this is a cache folder: pass it as --cache"


def _status(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    return subprocess.run([EPOCHFS, "status", *args], capture_output=True, text=True, env=env, timeout=60)


def test_a_cache_given_as_mount_is_told_to_use_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with Store(cache, create=True) as store:
        store.configure(Policy(capacity=10_000, min_samples=1))
    proc = _status("--mount", str(cache))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"--mount: {cache} is not an epochfs mount (no status.json): {HINT}" in proc.stderr, proc.stderr
    assert _status("--cache", str(cache)).returncode == 0  # the advice works


def test_a_plain_folder_given_as_mount_gets_no_cache_hint(tmp_path: Path) -> None:
    proc = _status("--mount", str(tmp_path))
    assert proc.returncode == 2 and "is not an epochfs mount (no status.json)" in proc.stderr, proc.stderr
    assert HINT not in proc.stderr, proc.stderr
