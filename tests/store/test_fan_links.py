"""A link planted in ``objects/`` is never followed out of the cache.

Another process with write access to the cache volume can put a symbolic link where a fan-out
folder (``objects/<ab>``) or an object file belongs. An install then wrote the object into the
folder the link named, an eviction unlinked a file there, and the object scan, which skips such
links, said nothing. Now: an install replaces the link with a real folder (the link removed, never
what it names), an unlink finds nothing of the store's behind one, and the object scan replaces
linked fan-out folders and removes linked object files, the samples they stood for taken out for
their repair in place. Real files, links and a real store.
"""

from __future__ import annotations

import logging
import os
import stat
import threading
from pathlib import Path

import pytest
from store_helpers import put, sid_of

from epochfs.sidecar.store import Policy, Store, fanout, object_name, objectscan


def _store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "cache", create=True)
    store.configure(Policy(capacity=10**7, headroom=0.0))
    return store


def _outside(tmp_path: Path, name: str = "outside") -> Path:
    """A folder out of the cache holding one file of its owner's, mode 0700."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "owners-file").write_bytes(b"the owner's")
    folder.chmod(0o700)
    return folder


def _untouched(folder: Path, *names: str) -> None:
    assert sorted(os.listdir(folder)) == sorted(["owners-file", *names])
    assert (folder / "owners-file").read_bytes() == b"the owner's"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_an_install_through_a_linked_fan_folder_lands_in_the_cache(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    outside = _outside(tmp_path)
    with _store(tmp_path) as store:
        fan = store.objects_dir / sid_of("train/one.bin")[:2]
        fan.symlink_to(outside)
        caplog.set_level(logging.WARNING, logger="epochfs.store")
        put(store, "train/one.bin", 14, fill=ord("o"))
        assert not fan.is_symlink() and fan.is_dir(), "the link is replaced by a real folder"
        assert stat.S_IMODE(fan.stat().st_mode) == 0o755
        obj = store.objects_dir / object_name(sid_of("train/one.bin"))
        assert obj.read_bytes() == b"o" * 14 and os.path.realpath(obj) == str(obj)
        assert stat.S_IMODE(obj.stat().st_mode) == 0o444
        _untouched(outside)
    assert any("is a symbolic link to" in r.getMessage() and str(fan) in r.getMessage()
               for r in caplog.records if r.levelno == logging.WARNING)


def test_a_fan_folder_that_is_a_file_is_replaced(tmp_path: Path) -> None:
    with _store(tmp_path) as store:
        fan = store.objects_dir / sid_of("k")[:2]
        fan.write_bytes(b"not a folder")
        put(store, "k", 10)
        assert fan.is_dir() and (fan / sid_of("k")).stat().st_size == 10


def test_an_unlink_never_goes_through_a_linked_fan_folder(tmp_path: Path) -> None:
    """An evicted or orphaned object's unlink: a fan-out folder swapped for a link to a folder
    holding a file of the object's name leaves that file alone."""
    outside = _outside(tmp_path)
    with _store(tmp_path) as store:
        sid = sid_of("k")
        put(store, "k", 10)
        fan = store.objects_dir / sid[:2]
        os.chmod(outside, 0o755)
        os.rename(fan / sid, outside / sid)  # the neighbour's copy of the object, outside
        os.rmdir(fan)
        fan.symlink_to(outside)
        os.chmod(outside, 0o700)
        store.files.remove([sid])
        assert not store.files.unlink(sid)
        _untouched(outside, sid)
        assert fan.is_symlink(), "an unlink makes no folder"


def test_the_object_scan_replaces_linked_fan_folders_and_removes_linked_objects(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The state a planted link left (the object of one sample written through a linked fan-out
    folder, another sample's object file a link to a file of the same size): the sizes the scan
    reads through the links match, and it said "0 missing". Now both links go, and both samples
    are taken out for their repair."""
    outside = _outside(tmp_path)
    with _store(tmp_path) as store:
        keys = ["fan", *(k for k in (f"k{i}" for i in range(100)) if sid_of(k)[:2] != sid_of("fan")[:2])][:2]
        for key in keys:
            put(store, key, 600)
        fan_sid, link_sid = sid_of(keys[0]), sid_of(keys[1])
        fan = store.objects_dir / fan_sid[:2]
        os.chmod(outside, 0o755)
        os.rename(fan / fan_sid, outside / fan_sid)
        os.rmdir(fan)
        fan.symlink_to(outside)
        linked = store.objects_dir / object_name(link_sid)
        (tmp_path / "same-size").write_bytes(b"x" * 600)
        os.unlink(linked)
        linked.symlink_to(tmp_path / "same-size")
        os.chmod(outside, 0o700)
        caplog.set_level(logging.WARNING, logger="epochfs.store")
        report = objectscan.scan(lambda: store._ix, store.files, threading.Event(), duty=1.0)
        assert report is not None and report.lost == 2, "the samples behind the links are taken out"
        assert report.planted == 2
        assert fan.is_dir() and not fan.is_symlink() and os.listdir(fan) == []
        assert not os.path.lexists(linked)
        assert (tmp_path / "same-size").read_bytes() == b"x" * 600
        _untouched(outside, fan_sid)
        assert store.stats().repairing == 2
    assert any("were symbolic links" in r.getMessage() for r in caplog.records)


def test_a_fan_link_planted_again_at_once_drops_that_download_not_the_sampler(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A neighbour that plants the link again as soon as the store replaced it: the open of the
    fan-out folder still refuses it, and that one download is dropped (fetched again later) rather
    than failing its batch, which the admitter would take for a broken store and stop the sampler."""
    outside = _outside(tmp_path)
    real = fanout.replace_with_folder

    def planted_again(path: str) -> None:
        real(path)
        os.symlink(outside, path)

    with _store(tmp_path) as store:
        fan = store.objects_dir / sid_of("train/one.bin")[:2]
        fan.symlink_to(outside)
        monkeypatch.setattr(fanout, "replace_with_folder", planted_again)
        caplog.set_level(logging.WARNING, logger="epochfs.store")
        put(store, "train/one.bin", 14, fill=ord("o"))  # raised NotADirectoryError before
        assert store.cached_among(["train/one.bin"]) == set()
        assert any("not admitting 'train/one.bin'" in r.getMessage() and "replaced again" in r.getMessage()
                   for r in caplog.records), [r.getMessage() for r in caplog.records]
        monkeypatch.setattr(fanout, "replace_with_folder", real)
        put(store, "train/one.bin", 14, fill=ord("o"))  # the neighbour gone: admitted
        assert store.cached_among(["train/one.bin"]) == {"train/one.bin"}
        _untouched(outside)


def test_a_fan_link_replaced_by_another_replacer_meanwhile_is_no_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The install and the object scan (two threads) both find the same link: the one that comes
    second finds the other's new folder where it meant to remove the link (EISDIR), and goes on
    into that folder."""
    outside = _outside(tmp_path)
    real = fanout._what

    def other_replacer_first(path: str) -> str:
        said = real(path)
        os.unlink(path)
        os.mkdir(path, 0o755)
        return said

    with _store(tmp_path) as store:
        fan = store.objects_dir / sid_of("train/one.bin")[:2]
        fan.symlink_to(outside)
        monkeypatch.setattr(fanout, "_what", other_replacer_first)
        put(store, "train/one.bin", 14, fill=ord("o"))  # raised IsADirectoryError before
        assert store.cached_among(["train/one.bin"]) == {"train/one.bin"}
        assert not fan.is_symlink() and fan.is_dir()
        _untouched(outside)
