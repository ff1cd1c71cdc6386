"""``FileRemote.put_file`` writes through the sidecar's one atomic writer
(:func:`epochfs.sidecar.remote.objects.replace_local`): a write that fails leaves nothing of
its own in the dataset folder, where the next listing would take a leftover temp for a sample,
and one that succeeds leaves the new file alone, whole, with the mode of the file it replaced."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from epochfs.sidecar.remote import RemoteError
from epochfs.sidecar.remote.registry import open_remote


def _entries(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_put_that_cannot_replace_its_key_leaves_no_temp_in_the_dataset(tmp_path: Path) -> None:
    root = tmp_path / "data"
    (root / "index.txt").mkdir(parents=True)  # a folder where the file would go: the rename fails
    source = tmp_path / "src"
    source.write_text("x\n")
    remote = open_remote(f"file://{root}")
    try:
        with pytest.raises(RemoteError, match=r"cannot write file://.*/index\.txt: .*Is a directory"):
            remote.put_file("index.txt", str(source))
    finally:
        remote.close()
    assert _entries(root) == ["index.txt"], "a temp left in the dataset folder"


def test_a_put_whose_source_is_gone_leaves_the_old_file_and_no_temp(tmp_path: Path) -> None:
    root = tmp_path / "data"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "index.txt").write_text("old\n")
    remote = open_remote(f"file://{root}")
    try:
        with pytest.raises(RemoteError, match="No such file"):
            remote.put_file("sub/index.txt", str(tmp_path / "missing"))
    finally:
        remote.close()
    assert _entries(root) == ["sub", "sub/index.txt"]
    assert (root / "sub" / "index.txt").read_text() == "old\n"


def test_a_put_replaces_the_file_whole_and_keeps_its_mode(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    (root / "index.txt").write_text("old\n")
    os.chmod(root / "index.txt", 0o640)
    source = tmp_path / "src"
    source.write_bytes(b"new " * 100_000)
    remote = open_remote(f"file://{root}")
    try:
        remote.put_file("index.txt", str(source))
        remote.put_file("deeper/new.txt", str(source))  # its folders made
    finally:
        remote.close()
    assert (root / "index.txt").read_bytes() == source.read_bytes()
    assert os.stat(root / "index.txt").st_mode & 0o777 == 0o640
    assert _entries(root) == ["deeper", "deeper/new.txt", "index.txt"]
