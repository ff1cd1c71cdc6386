"""``--mount`` given as a symlink whose folder is gone: the refusal names the link and where it
points (it said "is not a directory", which the user's ``ls -d`` contradicts for a link to a folder
they remember making). The real ``epochfs sidecar`` is run; it stops before anything starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EPOCHFS = [sys.executable, "-m", "epochfs.sidecar.cli"]


def _sidecar(tmp_path: Path, mount: Path) -> subprocess.CompletedProcess[str]:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    (data / "a.bin").write_bytes(b"a")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    return subprocess.run([*EPOCHFS, "sidecar", "--remote", data.as_uri(), "--cache", str(tmp_path / "cache"),
                           "--mount", str(mount)], capture_output=True, text=True, env=env, timeout=120)


def test_a_dangling_symlink_mount_is_named_as_one(tmp_path: Path) -> None:
    mount = tmp_path / "view"
    mount.symlink_to(tmp_path / "gone")
    proc = _sidecar(tmp_path, mount)
    assert proc.returncode == 2, proc.stderr
    assert f"--mount: {mount} is a symlink to {tmp_path / 'gone'}, which does not exist" in proc.stderr
    assert not (tmp_path / "gone").exists()  # not made: the link may name a volume not mounted yet


def test_a_file_mount_is_not_a_directory(tmp_path: Path) -> None:
    mount = tmp_path / "view"
    mount.write_text("x")
    proc = _sidecar(tmp_path, mount)
    assert proc.returncode == 2, proc.stderr
    assert f"--mount: {mount} is not a directory" in proc.stderr
