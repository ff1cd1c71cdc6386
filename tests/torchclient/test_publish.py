"""The atomic publishing steps (epochfs.torchclient.publish), which the folder view and plainfolder share.

The folder view's own tests (tests/folderview/) check its publishing, crash recovery included,
through these steps; here: what the steps promise on their own, on a real file system, and that
``plainfolder.publish_epoch`` keeps the promise too (a failed publish leaves no half epoch and no
temporary name behind).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from epochfs.torchclient import layout, publish
from epochfs.torchclient.plainfolder import publish_epoch


def test_importing_the_publishing_steps_does_not_import_torch() -> None:
    """The folder view (sidecar image, no torch) publishes with this module."""
    code = ("import sys, epochfs.torchclient.publish\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_a_failed_replace_keeps_the_old_file_whole_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "status.json"
    publish.replace_file(target, b"old\n", fsync=True)

    def chunks() -> Iterator[bytes]:
        yield b"new, first page\n"
        raise OSError(28, "No space left on device")  # a full volume in the middle of a manifest

    with pytest.raises(OSError):
        publish.replace_file(target, chunks(), fsync=True)
    assert target.read_bytes() == b"old\n"
    assert os.listdir(tmp_path) == ["status.json"]


def test_a_tree_appears_whole_under_its_name_with_its_folders_and_links(tmp_path: Path) -> None:
    links = {"a.bin": "/objects/1", "train/cat/x.jpg": "/objects/2", "train/dog/y.jpg": "/objects/3"}
    visible = tmp_path / "epoch-3"
    publish.publish_tree(visible, publish.folders_of(links), links, publish.DIR_MODE)
    assert os.listdir(tmp_path) == ["epoch-3"]  # no temporary name left
    assert {rel: os.readlink(visible / rel) for rel in links} == links
    assert sorted(os.listdir(visible / "train")) == ["cat", "dog"]
    for folder in ("", "train", "train/cat", "train/dog"):
        assert (visible / folder).stat().st_mode & 0o777 == publish.DIR_MODE


def test_a_failed_tree_leaves_neither_the_epoch_nor_its_temporary_name(tmp_path: Path) -> None:
    links = {"a": "/objects/1", "a/b": "/objects/2"}  # "a" both a file and a folder
    with pytest.raises(OSError):
        publish.publish_tree(tmp_path / "epoch-0", publish.folders_of(links), links, publish.DIR_MODE)
    assert os.listdir(tmp_path) == []


def test_a_retired_tree_disappears_by_one_rename_then_is_removed(tmp_path: Path) -> None:
    links = {"d/x": "/objects/1"}
    visible = tmp_path / "epoch-1"
    publish.publish_tree(visible, publish.folders_of(links), links, publish.DIR_MODE)
    gone = publish.retire_tree(visible)
    assert gone is not None and gone.name.startswith(publish.TEMP_PREFIX + publish.RETIRED_TAG)
    assert not visible.exists() and layout.list_epochs(tmp_path) == []
    publish.remove_tree(gone)  # its folders are 0555: opened up first
    assert os.listdir(tmp_path) == []
    assert publish.retire_tree(visible) is None


def test_plainfolder_publishes_with_the_same_steps(tmp_path: Path) -> None:
    """A publish that fails (a path that is a file and a folder) leaves no epoch, no ``latest``
    and no temporary name; a good one shows the epoch, its manifest, ``latest`` and status."""
    objects = tmp_path / "objects"
    objects.mkdir()
    (objects / "1").write_bytes(b"one")
    root = tmp_path / "root"
    with pytest.raises(OSError):
        publish_epoch(root, 0, {"a": objects / "1", "a/b": objects / "1"})
    assert sorted(os.listdir(root)) == [layout.CONTROL_DIR]
    assert not layout.latest_path(root).is_symlink()

    publish_epoch(root, 0, {"a/b": objects / "1"})
    assert sorted(os.listdir(root)) == [layout.CONTROL_DIR, "epoch-0", "latest"]
    assert os.readlink(layout.latest_path(root)) == "epoch-0"
    assert os.readlink(root / "epoch-0" / "a" / "b") == str(objects / "1")
    manifest = layout.read_manifest(root, 0)
    assert manifest is not None and manifest.paths == ["a/b"] and manifest.sizes == [3]
    status = layout.read_status(root)
    assert status is not None and status["latest_epoch"] == 0
    assert sorted(os.listdir(layout.control_dir(root))) == [layout.manifest_name(0), layout.STATUS_NAME]
