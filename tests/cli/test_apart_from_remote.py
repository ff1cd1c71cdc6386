"""A ``file://`` remote's folder may not hold the cache or the view.

The sampler lists the remote's folder: a cache inside it had its own index, WAL and lock taken for
samples (``cache/index.sqlite-shm`` in epoch 0, a WAL "changed under this process"), and a mount
inside it had the view's files sampled (every sample again under ``mnt/epoch-N/``, 20 files for a
dataset of 5 after one relist). Both are refused at the start, exit 2, before anything is made,
by the real command line.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EPOCHFS = str(Path(sys.executable).parent / "epochfs")


def _dataset(tmp_path: Path) -> Path:
    remote = tmp_path / "data"
    (remote / "train").mkdir(parents=True)
    for i in range(3):
        (remote / "train" / f"{i}.bin").write_bytes(bytes([i]) * 100)
    return remote


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EPOCHFS, *args], capture_output=True, text=True, timeout=60, check=False)


def test_a_cache_inside_the_remote_folder_is_refused(tmp_path: Path) -> None:
    remote = _dataset(tmp_path)
    for cache in (remote / "cache", remote):
        out = _run("sample", "--remote", f"file://{remote}", "--cache", str(cache), "--capacity", "1Mi")
        assert out.returncode == 2, out.stderr
        assert f"--cache: {cache} is inside the remote's folder {remote}" in out.stderr, out.stderr
        assert "put it beside that folder" in out.stderr, out.stderr
    assert sorted(p.name for p in remote.iterdir()) == ["train"]  # nothing made there


def test_a_mount_inside_the_remote_folder_is_refused(tmp_path: Path) -> None:
    remote = _dataset(tmp_path)
    mount = remote / "mnt"
    mount.mkdir()
    out = _run("sidecar", "--remote", f"file://{remote}", "--cache", str(tmp_path / "cache"),
               "--mount", str(mount), "--capacity", "1Mi", "--health-port", "0")
    assert out.returncode == 2, out.stderr
    assert f"--mount: {mount} is inside the remote's folder {remote}" in out.stderr, out.stderr
    assert not (tmp_path / "cache").exists()


def test_a_cache_and_mount_beside_the_remote_folder_pass_the_check(tmp_path: Path) -> None:
    from epochfs.sidecar.volumes import check_apart_from_remote

    remote = _dataset(tmp_path)
    check_apart_from_remote(f"file://{remote}", cache=tmp_path / "cache", mount=tmp_path / "view")
    check_apart_from_remote(f"file://{remote}", cache=tmp_path / "data2")  # a name that starts alike
    check_apart_from_remote("s3://bucket/data", cache=remote / "cache")  # no folder here
