"""The store's class folders (sidecar/store/classes.py): one list that only grows, kept outside the index."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fuse_helpers import open_store

from epochfs.sidecar.store import classes
from epochfs.sidecar.store.listings import Part
from epochfs.torchclient.layout import format_classes, parse_classes


def test_the_first_record_is_sorted_and_later_ones_are_appended(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache")
    assert classes.read(store.root) == classes.ClassFolders()
    first = store.record_class_folders(["train/dog", "train/cat/", "val/cat"], through=0)
    assert first.folders == ("train", "train/cat", "train/dog", "val", "val/cat")
    assert first.through == 0
    second = store.record_class_folders(["train/ant", "train/cat", "train/zebra", "val/ant/x"], through=3)
    # Known folders keep their places; new ones (parents included) come after, sorted.
    assert second.folders == (*first.folders, "train/ant", "train/zebra", "val/ant", "val/ant/x")
    assert store.record_class_folders(["train/cat"], through=1).through == 3  # never lowered
    maps = parse_classes(format_classes(second.folders), source="test")
    assert maps["train"] == {"cat": 0, "dog": 1, "ant": 2, "zebra": 3}
    assert maps["val"] == {"cat": 0, "ant": 1} and maps["."] == {"train": 0, "val": 1}
    store.close()


def test_unsafe_names_are_left_out_and_the_list_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    assert classes.with_parents(["", "/", "a/../b", "a/./b", "a//b", "ok/x/"]) == {"ok", "ok/x"}
    monkeypatch.setattr(classes, "MAX_FOLDERS", 3)
    assert classes.merged(("a",), ["b", "c", "d"]) == ("a", "b", "c")


def test_past_the_bound_the_shallowest_folders_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """``train/<class>/<clip>/`` (a video set): the clips of the first classes filled the list before
    the later classes were reached, which then had no index; the classes come first now."""
    monkeypatch.setattr(classes, "MAX_FOLDERS", 100)
    found = [f"train/c{i:02d}/clip{j:02d}/" for i in range(40) for j in range(10)]
    kept = classes.merged((), found)
    assert len(kept) == 100 and list(kept) == sorted(kept)
    assert {"train", *(f"train/c{i:02d}" for i in range(40))} <= set(kept)
    assert kept[:3] == ("train", "train/c00", "train/c00/clip00")


def test_the_list_outlives_the_index(tmp_path: Path) -> None:
    """Labels must survive an index that is rebuilt: the list is a file beside it."""
    cache = tmp_path / "cache"
    store = open_store(cache)
    store.record_class_folders(["train/b", "train/a"])
    store.close()
    for name in os.listdir(cache):
        if name.startswith("index.sqlite"):
            os.unlink(cache / name)
    store = open_store(cache)
    assert classes.read(store.root).folders == ("train", "train/a", "train/b")
    assert store.record_class_folders(["train/0"]).folders == ("train", "train/a", "train/b", "train/0")
    store.close()


def test_the_running_listings_parts_name_its_folders(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache")
    assert store.listed_class_folders() == []
    mark = store.listing_mark()
    store.listings().begin([Part(0, "train/cat/", "", None), Part(1, "train/", "train/m/", None),
                            Part(2, "", "", None)], "list")
    assert sorted(store.listed_class_folders()) == ["train/", "train/cat/", "train/m/"]
    assert store.listing_mark() != mark
    store.close()


def test_the_catalogs_folders_are_read_in_one_query(tmp_path: Path) -> None:
    from epochfs.sidecar.store import CatalogRow

    store = open_store(tmp_path / "cache")
    assert store.cataloged_class_folders() == []
    store.add_catalog([CatalogRow(key, f"{i:032x}", 1, "v", i) for i, key in enumerate(
        ["top.bin", "train/cat/1.png", "train/cat/2.png", "train/dog/x/3.png", "val/ant/4.png"])])
    store.finalize_catalog()
    assert sorted(store.cataloged_class_folders()) == ["train/cat/", "train/dog/x/", "val/ant/"]
    store.close()
