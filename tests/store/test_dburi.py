"""Every connection to a cache's index names it by :func:`epochfs.sidecar.store.dburi.uri`: the
mode said (``rw`` never makes a file), and any folder name opens, ``?``, ``#``, ``%`` and spaces
included (a plain ``file:`` URI ends the path at ``?`` or ``#``: the read-only readers of the
index found no file there and went on without its counters and reads).

Real SQLite files, a real store made by admissions.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from fuse_helpers import admit, make_objects, open_store

from epochfs.sidecar.store import INDEX_NAME, countercarry
from epochfs.sidecar.store.dburi import uri

ODD = "we?ird #1 100%41 name"
"""A folder name with what ends or escapes a URI's path."""


def test_each_mode_opens_what_it_says(tmp_path: Path) -> None:
    folder = tmp_path / ODD
    folder.mkdir()
    db = folder / "x.sqlite"
    with pytest.raises(sqlite3.OperationalError):
        sqlite3.connect(uri(db, "rw"), uri=True)
    with pytest.raises(sqlite3.OperationalError):
        sqlite3.connect(uri(db, "ro"), uri=True)
    assert sorted(p.name for p in tmp_path.rglob("*")) == [ODD], "a refused open made a file"
    made = sqlite3.connect(uri(db, "rwc"), uri=True)
    made.execute("CREATE TABLE t (v)")
    made.execute("INSERT INTO t VALUES (7)")
    made.commit()
    made.close()
    assert db.is_file()
    for mode in ("ro", "rw"):
        with sqlite3.connect(uri(db, mode), uri=True) as conn:
            assert conn.execute("SELECT v FROM t").fetchall() == [(7,)]
    with sqlite3.connect(uri(db, "ro", immutable=True), uri=True) as conn:
        assert conn.execute("SELECT v FROM t").fetchall() == [(7,)]
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            conn.execute("INSERT INTO t VALUES (8)")


def test_a_damaged_index_in_an_odd_folder_gives_its_counters_to_the_rebuild(tmp_path: Path) -> None:
    cache = tmp_path / ODD / "cache"
    with open_store(cache) as store:
        admit(store, make_objects(4, 10))
    counters, _ = countercarry.read_damaged(cache / INDEX_NAME)
    assert counters is not None and counters.get("fetched_total") == 4, counters
    assert [p.name for p in tmp_path.iterdir()] == [ODD], "a read-only look made a file beside it"
