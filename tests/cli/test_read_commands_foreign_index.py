"""The commands that read a cache refuse a folder whose ``index.sqlite`` is not epochfs's, and change
nothing in it.

Before: ``epochfs status --cache F`` over another program's SQLite database ``F/index.sqlite`` (or an
empty file of that name) printed an empty cache, exit 0, and left the database with epochfs's 12
tables, in WAL mode, beside new ``objects/`` and ``tmp/`` folders; ``cut`` then said "cannot cut
yet" and ``verify`` "index: ok". Real ``epochfs`` processes, real SQLite files.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest
from sampler_helpers import EPOCHFS

from epochfs.sidecar.store import INDEX_NAME, Store

ENV = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
COMMANDS = ["status", "cut", "verify", "relist", "sample"]
"""``sample`` makes a cache where there is none, and takes a folder's own index as its cache's:
another program's was given epochfs's schema and the folder filled beside it."""


def _notes(index: Path) -> None:
    db = sqlite3.connect(index)
    db.execute("CREATE TABLE notes(t)")
    db.execute("INSERT INTO notes VALUES ('mine')")
    db.commit()
    db.close()


def _no_tables(index: Path) -> None:
    db = sqlite3.connect(index)
    db.execute("PRAGMA user_version=3")  # a database file with a header and no table
    db.close()


def _empty(index: Path) -> None:
    index.write_bytes(b"")


def _text(index: Path) -> None:
    index.write_text("my notes, not a database\n")


def _run(command: str, cache: Path) -> subprocess.CompletedProcess[str]:
    remote = ["--remote", (cache.parent / "data").as_uri()] if command == "sample" else []
    (cache.parent / "data").mkdir(exist_ok=True)
    return subprocess.run([EPOCHFS, command, "--cache", str(cache), *remote], capture_output=True, text=True,
                          timeout=60, env=ENV)


def _folder(cache: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(cache.iterdir())}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("make", "said"), [(_notes, "its tables: notes"), (_empty, "an empty file"),
                                            (_no_tables, "no tables"), (_text, "not an SQLite database")])
def test_a_foreign_index_is_refused_in_one_line_and_left_as_it_was(
        tmp_path: Path, command: str, make: object, said: str) -> None:
    cache = tmp_path / "fc"
    cache.mkdir()
    assert callable(make)
    make(cache / INDEX_NAME)
    before = _folder(cache)
    r = _run(command, cache)
    assert r.returncode == 2, (r.stdout, r.stderr)
    [line] = r.stderr.strip().splitlines()
    prefix = f"epochfs {command}: --cache {cache}: not an epochfs cache ({INDEX_NAME} is "
    assert line.startswith(prefix), line
    assert said in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert _folder(cache) == before  # no schema, no objects/ or tmp/, no -wal or -shm
    if make is _notes:
        db = sqlite3.connect(f"file:{cache / INDEX_NAME}?mode=ro", uri=True)
        try:
            assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
            assert [r[0] for r in db.execute("SELECT name FROM sqlite_master")] == ["notes"]
        finally:
            db.close()


def test_an_index_being_made_with_nothing_in_it_is_a_cache(tmp_path: Path) -> None:
    """The schema of a new index is in its write-ahead log until a checkpoint, while the sampler
    that made it holds it open: status reads it as the empty cache it is. A moment before, the
    index is an empty file beside the objects/ folder the store makes first: a cache too."""
    opening = tmp_path / "opening"
    (opening / "objects").mkdir(parents=True)
    (opening / INDEX_NAME).write_bytes(b"")
    r = _run("status", opening)
    assert r.returncode == 0 and "not an epochfs cache" not in r.stderr, r.stderr
    cache = tmp_path / "cache"
    with Store(cache, create=True):
        assert (cache / f"{INDEX_NAME}-wal").stat().st_size > 0
        r = _run("status", cache)
        assert r.returncode == 0, r.stderr
        assert r.stdout.splitlines()[1].startswith("samples 0 "), r.stdout
    r = _run("cut", cache)  # closed (checkpointed): a cache still
    assert r.returncode == 1 and "cannot cut yet" in r.stderr, r.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_an_index_that_is_a_folder_is_refused_in_one_line(tmp_path: Path, command: str) -> None:
    """Not SQLite's "unable to open database file", which says nothing of a folder (an exploratory
    bad-input run)."""
    cache = tmp_path / "fc"
    (cache / INDEX_NAME).mkdir(parents=True)
    r = _run(command, cache)
    assert r.returncode == 2, (r.stdout, r.stderr)
    [line] = r.stderr.strip().splitlines()
    assert line == (f"epochfs {command}: --cache {cache}: not an epochfs cache ({INDEX_NAME} is a folder); "
                    "give another --cache"), line
    assert sorted(p.name for p in cache.iterdir()) == [INDEX_NAME]
