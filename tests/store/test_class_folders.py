"""The store's class folders (sidecar/store/classes.py): one list that only grows, kept outside the index."""

from __future__ import annotations

import os
import random
import sqlite3
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


def _reference_with_parents(folders: list[str]) -> set[str]:
    """:func:`classes.with_parents` spelled out: every prefix of every safe folder rebuilt, the
    hidden ones left out."""
    out: set[str] = set()
    for folder in folders:
        parts = folder.strip("/").split("/")
        if not folder.strip("/") or any(p in ("", ".", "..") or "\n" in p or "\0" in p for p in parts):
            continue
        for i in range(1, len(parts) + 1):
            if not classes.hidden_folder(parts[i - 1]):
                out.add("/".join(parts[:i]))
    return out


def _random_folders(rng: random.Random, *, deep: int) -> list[str]:
    """Folders over a few names (hidden and unsafe ones among them), some nested ``deep`` levels,
    each listed with some of the folders above it as an epoch's folders are."""
    names = ["a", "b", "cat", ".h", "é", "..", ".", "", "x\ny", "d"]
    folders: list[str] = []
    for _ in range(rng.randrange(1, 12)):
        depth = rng.choice([1, 2, 3, rng.randrange(1, deep + 1)])
        parts = [rng.choice(names[:5]) if rng.random() < 0.97 else rng.choice(names) for _ in range(depth)]
        for i in sorted(rng.sample(range(1, depth + 1), rng.randrange(1, min(depth, 40) + 1))):
            folders.append("/".join(parts[:i]) + rng.choice(["", "/"]))
    rng.shuffle(folders)
    return folders


@pytest.mark.parametrize("seed", range(40))
def test_with_parents_is_the_reference_on_random_folders(seed: int) -> None:
    rng = random.Random(seed)
    folders = _random_folders(rng, deep=300 if seed % 4 == 0 else 8)
    assert classes.with_parents(folders) == _reference_with_parents(folders)
    assert classes.merged((), folders) == tuple(sorted(_reference_with_parents(folders)))


def _ancestors(folders: list[str]) -> set[str]:
    """Every folder above or at one of ``folders``, hidden ones included (what must be looked at)."""
    paths = [f.strip("/") for f in folders]
    return {"/".join(p.split("/")[:i]) for p in paths for i in range(1, p.count("/") + 2)}


@pytest.mark.parametrize("order", ["shallow first", "deep first", "shuffled"])
def test_with_parents_looks_at_each_ancestor_once(monkeypatch: pytest.MonkeyPatch, order: str) -> None:
    """The work is linear: each folder above the input is named (and its name looked at) once,
    however many of its descendants the input lists. A deep key's epoch lists every level of it,
    and rebuilding every ancestor of each cost the cube of its depth (19.7 s at 2,040 levels), all
    under the index's write lock."""
    chain = ["/".join(["d"] * i + ([".v"] if i % 7 == 0 else [])) for i in range(1, 400)]
    chain += [f"train/c{i}/clip{j}" for i in range(20) for j in range(5)]
    if order == "deep first":
        chain.reverse()
    elif order == "shuffled":
        random.Random(3).shuffle(chain)
    want = _reference_with_parents(chain)
    looked: list[str] = []
    real = classes.hidden_folder

    def counted(name: str) -> bool:
        looked.append(name)
        return real(name)

    monkeypatch.setattr(classes, "hidden_folder", counted)
    assert classes.with_parents(chain) == want
    assert len(looked) <= len(_ancestors(chain))


def test_record_builds_the_parents_before_the_write_lock(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The folders' parents are built with no write lock held: another connection may take the
    index's write lock all the while, so a record of many folders never holds up the sampler's
    writes (which failed with 'database is locked' while deep keys' folders were built)."""
    store = open_store(tmp_path / "cache")
    other = sqlite3.connect(tmp_path / "cache" / "index.sqlite", timeout=0, isolation_level=None)
    locked: list[str] = []
    real = classes.hidden_folder

    def looked_at(name: str) -> bool:
        try:
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
        except sqlite3.OperationalError as e:
            locked.append(f"{name}: {e}")
        return real(name)

    monkeypatch.setattr(classes, "hidden_folder", looked_at)
    got = store.record_class_folders(["train/cat/", "train/dog", ".git/x"], through=0)
    assert got.folders == (".git/x", "train", "train/cat", "train/dog")
    assert locked == []
    other.close()
    store.close()


def test_past_the_byte_bound_the_shallowest_folders_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The list is bounded by bytes as well as by count: folders of long paths would otherwise
    fill it (and classes.json) with hundreds of megabytes well within the count."""
    monkeypatch.setattr(classes, "MAX_FOLDER_BYTES", 2_000)
    long = "L" * 200
    found = [f"train/c{i}/{long}{j}/" for i in range(5) for j in range(3)]
    kept = classes.merged(("train",), found)
    assert kept[:1] == ("train",) and list(kept[1:]) == sorted(kept[1:])
    assert sum(len(f.encode()) + 1 for f in kept) <= 2_000
    assert {f"train/c{i}" for i in range(5)} <= set(kept)  # every class before any clip
    assert any(long in f for f in kept)
    assert all(f.rsplit("/", 1)[0] in kept for f in kept if "/" in f)  # parents before their children
    assert classes.merged(kept, [f"train/{long}x"]) == kept  # no room left for it: not recorded
