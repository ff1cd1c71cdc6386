"""A ``file://`` walk says what it passes over: a dataset whose linked folder is not there (a
volume not mounted) or is a symlink (not followed) must not look like a complete, smaller one."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from epochfs.sidecar.remote.file import FileRemote


def test_dangling_links_linked_folders_and_fifos_are_logged_and_counted(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "ds"
    (root / "train").mkdir(parents=True)
    for i in range(3):
        (root / "train" / f"{i}.bin").write_bytes(b"x" * (i + 1))
    elsewhere = tmp_path / "elsewhere" / "val"
    elsewhere.mkdir(parents=True)
    (elsewhere / "v.bin").write_bytes(b"v")
    (root / "val").symlink_to(elsewhere)  # a symlinked folder: not followed
    for i in range(2):  # links into a volume that is not mounted
        (root / "train" / f"gone-{i}.bin").symlink_to(tmp_path / "nfs" / f"{i}.bin")
    os.mkfifo(root / "train" / "pipe")
    (root / "train" / "linked.bin").symlink_to(root / "train" / "0.bin")  # a file link: listed

    with caplog.at_level(logging.WARNING, logger="epochfs.remote"):
        keys = sorted(str(o.key) for o in FileRemote(url=root.as_uri()).list())

    assert keys == ["train/0.bin", "train/1.bin", "train/2.bin", "train/linked.bin"]
    lines = [r.getMessage() for r in caplog.records]
    # One warning per kind as it is met, naming the first, and one line at the end with the counts.
    assert sum("passes over train/gone-0.bin" in line for line in lines) == 1, lines
    assert not any("gone-1.bin" in line for line in lines), lines
    assert any("passes over val: a symlinked folder" in line for line in lines), lines
    assert any("passes over train/pipe: not a regular file" in line for line in lines), lines
    summary = [line for line in lines if "listed without" in line]
    assert len(summary) == 1, lines
    assert "2 entries that could not be read (first: train/gone-0.bin)" in summary[0]
    assert "1 symlinked folders not followed (first: val)" in summary[0]
    assert "1 entries that are not regular files (first: train/pipe)" in summary[0]
    assert len(lines) == 4, lines


def test_a_clean_walk_logs_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.bin").write_bytes(b"x")
    with caplog.at_level(logging.WARNING, logger="epochfs.remote"):
        assert [str(o.key) for o in FileRemote(url=tmp_path.as_uri()).list()] == ["a/x.bin"]
    assert caplog.records == []
