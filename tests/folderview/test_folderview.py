"""The folder publisher (``--view folder``) in-process: layout, atomicity, retirement, recovery.

The publisher writes what ``fuse.view.View`` renders; ``test_folderview_equivalence.py`` compares
it with a real FUSE mount, ``test_folderview_crash.py`` kills it at random moments.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
from fuse_helpers import admit, files_under, make_objects, open_store

from epochfs.sidecar import folderview
from epochfs.sidecar.folderview import FolderPublisher
from epochfs.sidecar.store import Store
from epochfs.torchclient import layout


def last_read(store: Store, n: int) -> float:
    row = store._ix.query("SELECT last_read FROM epochs WHERE n=?", (n,))
    return float(row[0][0])


def publisher(store: Store, folder: Path, **kw: object) -> FolderPublisher:
    p = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir, **kw)  # type: ignore[arg-type]
    p.recover()
    return p


def test_publishes_the_layout_with_manifest_latest_and_status(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache")
    objects = make_objects(12, 3000, seed=1) | make_objects(3, 10, prefix="val/deep/", seed=2)
    admit(store, objects)
    store.cut(0)
    folder = tmp_path / "view"
    p = publisher(store, folder)
    step = p.step()
    assert step.published == [0] and step.latest == 0
    assert sorted(os.listdir(folder)) == [".epochfs", "epoch-0", "latest"]
    assert os.readlink(folder / "latest") == "epoch-0"
    assert files_under(folder / "epoch-0") == objects
    assert files_under(folder / "latest") == objects
    # Every entry is a symlink into the link root, named by the store's object name.
    by_path = {f.path: f for f in store.epoch_files(0)}
    for rel in objects:
        entry = folder / "epoch-0" / rel
        assert entry.is_symlink()
        assert os.readlink(entry) == f"{store.objects_dir}/{by_path[rel].object_name}"
    manifest = layout.read_manifest(folder, 0)
    assert manifest is not None and sorted(manifest.paths) == sorted(objects)
    assert manifest.total_bytes == sum(map(len, objects.values()))
    status = layout.read_status(folder)
    assert status is not None and status["latest_epoch"] == 0
    assert layout.list_epochs(folder) == [0]
    # Read-only as the FUSE view shows it: folders 0555, control files 0444.
    assert stat.S_IMODE(os.stat(folder / "epoch-0").st_mode) == 0o555
    assert stat.S_IMODE(os.stat(folder / "epoch-0" / "val" / "deep").st_mode) == 0o555
    assert stat.S_IMODE(os.stat(layout.manifest_path(folder, 0)).st_mode) == 0o444
    assert stat.S_IMODE(os.stat(layout.status_path(folder)).st_mode) == 0o444
    store.close()


def test_nothing_changes_when_nothing_changed_and_status_follows_the_store(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache")
    admit(store, make_objects(4, 100))
    store.cut(0)
    p = publisher(store, tmp_path / "view", status_seconds=3600)
    p.step()
    inode = os.stat(tmp_path / "view" / "epoch-0").st_ino
    assert p.step().published == []
    assert os.stat(tmp_path / "view" / "epoch-0").st_ino == inode  # not rebuilt
    admit(store, make_objects(2, 100, start=4))
    store.cut(1)
    assert p.step().published == [1]
    assert layout.read_status(tmp_path / "view")["latest_epoch"] == 1  # type: ignore[index]
    assert os.readlink(tmp_path / "view" / "latest") == "epoch-1"
    store.close()


def test_the_manifest_is_there_before_the_folder_and_builds_are_hidden(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While an epoch is being built, the folder shows no epoch-N/ (only a dot-name readers skip),
    and its manifest is already complete."""
    store = open_store(tmp_path / "cache")
    admit(store, make_objects(30, 10))
    store.cut(0)
    folder = tmp_path / "view"
    p = publisher(store, folder)
    seen: list[tuple[list[int], bool, list[str]]] = []
    real_symlink = os.symlink

    def spy(target: str, link: object, *a: object, **k: object) -> None:
        seen.append((layout.list_epochs(folder), layout.manifest_path(folder, 0).exists(),
                     sorted(n for n in os.listdir(folder) if n.startswith("."))))
        real_symlink(target, link, *a, **k)  # type: ignore[arg-type]  # dir_fd: the build's folder

    monkeypatch.setattr(folderview.os, "symlink", spy)
    p.step()
    builds = [s for s in seen if s[2] != [".epochfs"]]
    assert builds, "the build must write symlinks"
    for epochs, manifest_there, dot_names in builds[:-1]:
        assert epochs == [] and manifest_there
        assert any(n.startswith(folderview.TEMP_PREFIX) for n in dot_names)
    assert layout.list_epochs(folder) == [0]
    store.close()


def test_retired_epochs_go_and_the_grace_pins_each_published_epoch(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache", keep_epochs=1, in_use_seconds=100.0)
    admit(store, make_objects(3, 10))
    for n in range(3):
        store.cut(n)
    folder = tmp_path / "view"
    p = publisher(store, folder)
    before = time.time()
    assert p.step().published == [0, 1, 2]
    assert all(last_read(store, n) >= before for n in range(3))  # the grace: read at publication
    assert store.retire() == []  # pinned by the grace
    assert store.retire(now=time.time() + 101) == [0, 1]
    step = p.step()
    assert step.retired == [0, 1]
    assert layout.list_epochs(folder) == [2]
    assert sorted(os.listdir(folder / ".epochfs")) == ["classes.json", "epoch-2.manifest", "status.json"]
    assert not [n for n in os.listdir(folder) if n.startswith(folderview.TEMP_PREFIX)]
    store.close()


def test_without_the_grace_only_the_stores_rule_pins(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache", keep_epochs=1, in_use_seconds=100.0)
    admit(store, make_objects(3, 10))
    store.cut(0)
    store.cut(1)
    p = publisher(store, tmp_path / "view", grace=False)
    p.step()
    assert store.retire() == [0]
    assert p.step().retired == [0]
    store.close()


def test_recover_removes_leftovers_and_stale_epochs_and_keeps_live_ones(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache", keep_epochs=1, in_use_seconds=100.0)
    admit(store, make_objects(5, 10))
    store.cut(0)
    store.cut(1)
    folder = tmp_path / "view"
    p = publisher(store, folder, grace=False)
    p.step()
    kept = os.stat(folder / "epoch-1").st_ino
    # What a killed publisher can leave: a half build (read-only folders), a half retirement, a
    # latest and a manifest being written.
    half = folder / ".epochfs-epoch-7-1-ab"
    (half / "sub").mkdir(parents=True)
    os.symlink("/nowhere", half / "sub" / "x")
    os.chmod(half / "sub", 0o555)
    os.chmod(half, 0o555)
    (folder / ".epochfs-retired-epoch-0-2-cd").mkdir()
    os.symlink("epoch-1", folder / ".epochfs-latest-3-ef")
    (folder / ".epochfs" / ".tmp-epoch-9.manifest-4-aa").write_text("partial")
    store.retire()  # epoch 0 retires while the publisher is down
    p2 = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir, grace=False)
    report = p2.recover()
    assert sorted(report.leftovers) == [
        ".epochfs-epoch-7-1-ab", ".epochfs-latest-3-ef", ".epochfs-retired-epoch-0-2-cd",
        ".epochfs/.tmp-epoch-9.manifest-4-aa"]
    assert report.stale == [0]
    assert sorted(os.listdir(folder)) == [".epochfs", "epoch-1", "latest"]
    assert os.stat(folder / "epoch-1").st_ino == kept  # a live epoch a reader may hold is kept
    assert not layout.manifest_path(folder, 0).exists()
    store.close()


def test_recover_replaces_an_epoch_that_differs_from_the_store(tmp_path: Path) -> None:
    """A folder published from another cache (or with another link root) is not the store's epoch:
    it is replaced, never served as if it were."""
    store = open_store(tmp_path / "cache")
    admit(store, make_objects(3, 10))
    store.cut(0)
    folder = tmp_path / "view"
    p = FolderPublisher(store=store, folder=folder, link_root=Path("/elsewhere"))
    p.recover()
    p.step()
    assert os.readlink(folder / "epoch-0" / "train" / "00000.bin").startswith("/elsewhere/")
    p2 = publisher(store, folder)
    assert p2.step().published == [0]
    assert os.readlink(folder / "epoch-0" / "train" / "00000.bin").startswith(str(store.objects_dir))
    store.close()


def test_a_failed_build_leaves_no_epoch_and_is_tried_again(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_path / "cache")
    admit(store, make_objects(5, 10))
    store.cut(0)
    folder = tmp_path / "view"
    p = publisher(store, folder)
    real_symlink = os.symlink
    calls = {"n": 0}

    def failing(target: str, link: object, *a: object, **k: object) -> None:
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(28, "No space left on device")
        real_symlink(target, link, *a, **k)  # type: ignore[arg-type]  # dir_fd: the build's folder

    monkeypatch.setattr(folderview.os, "symlink", failing)
    with pytest.raises(OSError):
        p.step()
    assert layout.list_epochs(folder) == []
    assert not [n for n in os.listdir(folder) if n.startswith(folderview.TEMP_PREFIX)]
    monkeypatch.setattr(folderview.os, "symlink", real_symlink)
    assert p.step(force_status=True).published == [0]
    store.close()
