"""The member lines as SQLite renders them (issue 20: a members file cheap enough for big cuts).

A cut writes its epoch's members file under the index's write lock, up to ``memberfiles.AT_CUT``
members (:mod:`epochfs.sidecar.store.memberformat`: SQLite renders each line, about 2 us a member
instead of 5.5). These tests hold the real limit to its promise (an epoch of exactly ``AT_CUT``
members gets its file from its cut, one more is left to the keeper) and the lines to the file's
contract: whichever encoder wrote them (SQLite's JSON functions, or the Python encoder that older
files came from and an SQLite without them still uses), an index rebuilt from the file holds every
member's row value for value: odd keys (quotes, backslashes, newlines, control and non-ASCII
characters), a path other than the key, a null or 64-bit rank, an admission time with 17
significant digits (``json_array`` alone keeps 15), and a range of the admission order with holes
wider than a line; a schedule-mode window and an epoch listed row by row the same.

Real stores, real cuts, a real damaged index (garbage over the whole file) rebuilt at the next open.
Sample rows are written with plain SQL (no object files: the rebuild lists the members and waits
for their repair, which changes no row)."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path

import pytest
from fuse_helpers import admit, make_objects, open_store
from store_helpers import epoch_snapshot, sid_of

from epochfs.sidecar.store import (
    INDEX_NAME,
    CatalogRow,
    Policy,
    Schedule,
    Store,
    memberchain,
    memberfiles,
    memberformat,
)
from epochfs.sidecar.store.memberfiles import path_of

ROW = "id, sid, key, path, size, checksum, version, admitted_at, digest, verified, rank"
"""Every column of a sample row, as the rebuilt index must have it back."""
ODD_KEYS = ['a "quoted" key.bin', "back\\slash\\", "new\nline\r\tand\x01\x1f",
            "caf\u00e9/\u6f22\u5b57/\U0001f600", "\u2028sep\u2029", "plain/key.bin", "]trailing[", "null",
            "123"]


def _insert(cache: Path, rows: list[tuple[object, ...]]) -> None:
    """Sample rows (without ids: the admission order), and the running totals a cut reads."""
    db = sqlite3.connect(cache / INDEX_NAME)
    try:
        with db:
            db.executemany("INSERT INTO samples(sid, key, path, size, checksum, version, admitted_at, "
                           "digest, verified, rank) VALUES(?,?,?,?,?,?,?,?,?,?)", rows)
            db.execute("INSERT OR REPLACE INTO counters SELECT 'cache_samples', COUNT(*) FROM samples")
            db.execute("INSERT OR REPLACE INTO counters SELECT 'cache_bytes', SUM(size) FROM samples")
    finally:
        db.close()


def _row(i: int, key: str | None = None) -> tuple[object, ...]:
    key = key if key is not None else f"train/{i:07d}.bin"
    sid = hashlib.blake2b(key.encode(), digest_size=16).hexdigest()
    return (sid, key, key, 1000 + i % 1000, f"md5:{sid}", f'"{sid}"', 1764756000.123456 + i * 1.000001, sid,
            "etag-md5", (i * 2654435761) % (1 << 63))


def _samples(cache: Path) -> list[tuple[object, ...]]:
    db = sqlite3.connect(f"file:{cache / INDEX_NAME}?mode=ro", uri=True)
    try:
        return db.execute(f"SELECT {ROW} FROM samples ORDER BY id").fetchall()
    finally:
        db.close()


def _rebuild(cache: Path) -> None:
    """Garbage over the whole index; the next open replaces it by one rebuilt from the files."""
    for suffix in ("-wal", "-shm"):
        (cache / (INDEX_NAME + suffix)).unlink(missing_ok=True)
    (cache / INDEX_NAME).write_bytes(b"not a database" * 400)
    with Store(cache, create=True):
        pass


@pytest.mark.long
def test_an_epoch_of_at_cut_members_gets_its_file_at_its_cut(tmp_path: Path) -> None:
    """The real limit: epoch 0 of exactly AT_CUT members (no base to chain on: a whole file) is
    written by its cut, no keeper pass; epoch 1 with AT_CUT + 1 members outside epoch 0's range
    is left to the keeper."""
    cache = tmp_path / "cache"
    with open_store(cache, capacity=1 << 40, keep_epochs=3):
        pass
    _insert(cache, [_row(i) for i in range(memberfiles.AT_CUT)])
    with Store(cache) as store:
        assert store.cut(0, force=True) == 0
        assert store.epochs()[0].samples == memberfiles.AT_CUT
        assert path_of(cache, 0).exists(), "AT_CUT members: written by the cut"
    _insert(cache, [_row(i) for i in range(memberfiles.AT_CUT, 2 * memberfiles.AT_CUT + 1)])
    with Store(cache) as store:
        assert store.cut(1, force=True) == 1
        assert not path_of(cache, 1).exists(), "AT_CUT + 1 new members: left to the keeper"
        assert store.write_members() == [1]


@pytest.mark.parametrize("encoder", ["sql", "python"])
def test_odd_values_come_back_value_for_value(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encoder: str) -> None:
    """Every column of every member, from a whole file and a chained one, through a rebuild."""
    if encoder == "sql":
        assert memberformat.SQL_JSON, "this SQLite renders the lines (its JSON functions)"
    monkeypatch.setattr(memberformat, "SQL_JSON", encoder == "sql")
    cache = tmp_path / "cache"
    with open_store(cache, capacity=1 << 40, keep_epochs=3):
        pass
    rows = [_row(i, key) for i, key in enumerate(ODD_KEYS)]
    rows.append((*_row(80, "other/key")[:2], "a path that is not the key", *_row(80)[3:]))
    rows.append((*_row(90)[:9], None))  # rank unknown
    rows.append((*_row(91)[:9], (1 << 63) - 1))
    rows.append((*_row(92)[:6], time.time(), *_row(92)[7:]))
    _insert(cache, rows)
    with Store(cache) as store:
        assert store.cut(0, force=True) == 0
    _insert(cache, [_row(100 + i, f"{key}/2") for i, key in enumerate(ODD_KEYS)])
    with Store(cache) as store:
        assert store.cut(1, force=True) == 1
    assert memberchain.base_of(memberchain.head(path_of(cache, 1)) or {}) == 0, "chained on epoch 0"
    if encoder == "python":
        assert path_of(cache, 0).read_bytes().isascii(), "the older spelling: \\u escapes"
    before = _samples(cache)
    _rebuild(cache)
    assert _samples(cache) == before


@pytest.mark.parametrize("encoder", ["sql", "python"])
def test_a_range_with_holes_wider_than_a_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encoder: str) -> None:
    """Samples evicted from the middle of what a later epoch's range covers (in no live epoch
    when they went) leave holes in its ids; the file lists every member around them, lines of
    up to CHUNK members, and none twice."""
    monkeypatch.setattr(memberformat, "SQL_JSON", encoder == "sql")
    monkeypatch.setattr(memberformat, "CHUNK", 7)
    cache = tmp_path / "cache"
    with open_store(cache, capacity=1 << 40):
        pass
    _insert(cache, [_row(i) for i in range(100)])
    db = sqlite3.connect(cache / INDEX_NAME)
    with db:
        db.execute("DELETE FROM samples WHERE id BETWEEN 3 AND 5 OR id BETWEEN 20 AND 61 OR id = 99")
        db.execute("INSERT OR REPLACE INTO counters SELECT 'cache_samples', COUNT(*) FROM samples")
        db.execute("INSERT OR REPLACE INTO counters SELECT 'cache_bytes', SUM(size) FROM samples")
    db.close()
    with Store(cache) as store:
        assert store.cut(0, force=True) == 0
        assert store.epochs()[0].samples == 100 - 3 - 42 - 1
    lines = path_of(cache, 0).read_bytes().splitlines()[1:-1]
    assert sum(line.count(b"],[") + 1 for line in lines) == 54
    assert max(line.count(b"],[") + 1 for line in lines) == 7
    before = _samples(cache)
    _rebuild(cache)
    assert _samples(cache) == before


@pytest.mark.parametrize("encoder", ["sql", "python"])
def test_a_window_and_an_epoch_listed_row_by_row_come_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, encoder: str) -> None:
    """The two other ways an epoch lists its members: a schedule-mode window (its bounds in the
    sampling order; lines paged by key), written by its cut, and an epoch listed row by row (a
    rebuilt one), whose file the keeper writes again here (lines paged by id)."""
    monkeypatch.setattr(memberformat, "SQL_JSON", encoder == "sql")
    monkeypatch.setattr(memberformat, "CHUNK", 7)
    cache = tmp_path / "cache"
    objects = make_objects(60, 50, prefix="caf\u00e9/\"q\"/")
    keys = sorted(objects)
    catalog = [CatalogRow(k, sid_of(k), 50, "v", rank=i * 7 % 1000) for i, k in enumerate(keys)]
    with open_store(cache) as store:
        store.configure(Policy(capacity=1 << 30, keep_epochs=3, schedule=Schedule(initial=40, growth=1.5)))
        store.add_catalog(catalog)
        store.finalize_catalog()
        admit(store, objects)
        assert store.cut(0) == 0
        assert path_of(cache, 0).exists(), "a window's file, written by its cut"
        files = epoch_snapshot(store)
    assert len(files[0]) == 40
    before = _samples(cache)
    _rebuild(cache)
    members = _samples(cache)
    assert len(members) == 40, "the window's members (the 20 samples in no epoch are not kept)"
    assert set(members) <= set(before)
    path_of(cache, 0).unlink()
    with Store(cache) as store:
        assert store._ix.query("SELECT first_sample, lo_key FROM epochs WHERE n=0") == [(None, None)], \
            "the rebuilt epoch is listed row by row"
        assert store.write_members() == [0]
    _rebuild(cache)
    assert _samples(cache) == members
    with Store(cache) as store:
        assert epoch_snapshot(store) == files
