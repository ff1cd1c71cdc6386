"""Index checks that do not grow with the index at every start (issue 14; store/checkup.py).

The start-up ``PRAGMA integrity_check`` read the whole index at every start (39 s at 10M samples).
Now a start runs it only when the index is small or the marker (store/checkmark.py) asks for it;
the full check runs in the sampler's background, and damage found there or by any SQLite error
marks the index so that the next start checks it in full and replaces it.

Real SQLite files with real damage (garbage written over a page picked with SQLite's ``dbstat``),
the real in-process sampler loop over sidecar/remote/testing.py. Which statements a start runs is
counted with SQLite's own trace callback."""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import inprocess
import pytest
from common import wait_until
from integrity_helpers import objects_of, sampling
from sampler_helpers import index_rows, verify_cache

from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.sampler import Sampler
from epochfs.sidecar.store import INDEX_NAME, CatalogRow, Store, StoreError, checkmark, checkup
from epochfs.sidecar.store.handle import IndexHandle
from epochfs.sidecar.store.index import Meta


@contextmanager
def traced(store: Store) -> Iterator[list[str]]:
    """Every statement the store's connection runs meanwhile (SQLite's trace callback)."""
    statements: list[str] = []
    db = store._ix.db
    db.set_trace_callback(statements.append)
    try:
        yield statements
    finally:
        db.set_trace_callback(None)


def full_checks(statements: list[str]) -> int:
    return sum("integrity_check" in s for s in statements)


def grow(store: Store, nbytes: int) -> None:
    """Catalog rows until the index (with its log) passes ``nbytes``: a cache the start-up no
    longer checks in full."""
    batch = 0
    while sum(p.stat().st_size for p in store.root.glob(f"{INDEX_NAME}*")) < nbytes:
        rows = [CatalogRow(f"train/{'x' * 80}/{batch:04d}-{i:05d}.bin",
                           hashlib.md5(f"{batch}/{i}".encode()).hexdigest(), 1000, "etag",
                           int.from_bytes(os.urandom(7), "big"))
                for i in range(5000)]
        store.add_catalog(rows)
        batch += 1


def garbage_on_a_middle_leaf(cache: Path, table: str) -> int:
    """Write garbage over a leaf page of ``table`` that is neither its first nor its last (the
    cheap check reads both ends of every b-tree, so only the full check can find this one).
    The cache must be stopped (everything checkpointed into the index file). Returns the page."""
    index = cache / INDEX_NAME
    assert not Path(f"{index}-wal").exists() or Path(f"{index}-wal").stat().st_size == 0
    db = sqlite3.connect(index)
    try:
        pages = [int(r[0]) for r in db.execute(
            "SELECT pageno FROM dbstat WHERE name=? AND pagetype='leaf' ORDER BY path", (table,))]
        size = int(db.execute("PRAGMA page_size").fetchone()[0])
    finally:
        db.close()
    assert len(pages) >= 3, pages
    page = pages[len(pages) // 2]
    with open(index, "r+b") as f:
        f.seek((page - 1) * size)
        f.write(os.urandom(size))
    return page


def run_until_it_ends(cache: Path, remote: MemoryRemote,
                      meanwhile: Callable[[Store], None] | None = None) -> list[BaseException]:
    """Open the cache and run the sampler's loop on a thread until it ends on its own (it must
    within 30 s); ``meanwhile`` runs once it is going. Returns what it raised."""
    with Store(cache, create=True) as store:
        stop = threading.Event()
        sampler = Sampler(store=store, remote=remote, settings=inprocess.settings_for(cache), stop=stop)
        thread, ended = inprocess.start_recording(sampler.run)
        try:
            if meanwhile is not None:
                meanwhile(store)
            wait_until(lambda: not thread.is_alive(), timeout=30, what="the sampler ends on the mark")
        finally:
            stop.set()
            thread.join(timeout=30)
    return ended


# ---------------------------------------------------------------------------- at start
def test_a_start_does_not_check_the_whole_index_when_the_last_full_check_passed(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with Store(cache, create=True) as store:
        grow(store, checkup.START_FULL_BYTES + (1 << 20))
        with traced(store) as statements:
            assert store.check_index() == "ok"
        assert full_checks(statements) == 0, "a large index gets the cheap check only"
        assert store.meta(Meta.INDEX_CHECK_RESULT) is None, "no full check was ever recorded"
    # The background check passes and records it (at full speed here, a due check).
    stop = threading.Event()
    background = checkup.Background(IndexHandle(cache / INDEX_NAME, create=False), stop, every=0, duty=1.0)
    background.start()
    try:
        wait_until(lambda: background.checks >= 1, timeout=60, what="one background full check")
    finally:
        stop.set()
        background.join(timeout=30)
    assert background.found is None and checkmark.reason(cache) is None
    with Store(cache, create=True) as store:
        checked_at = store.meta(Meta.INDEX_CHECKED_AT)
        assert store.meta(Meta.INDEX_CHECK_RESULT) == "ok" and checked_at is not None
        with traced(store) as statements:
            assert store.check_index() == "ok"
        assert full_checks(statements) == 0
        assert any("sqlite_master" in s for s in statements), "the cheap check reads the schema"
        assert store.meta(Meta.INDEX_CHECKED_AT) == checked_at
    # A marker (left by whatever found damage) forces the full check, which clears it.
    checkmark.mark(cache, "a test asks")
    with Store(cache, create=True) as store:
        with traced(store) as statements:
            assert store.check_index() == "ok"
        assert full_checks(statements) == 1
        assert checkmark.reason(cache) is None
        assert store.meta(Meta.INDEX_CHECKED_AT) != checked_at
    # A small index keeps the full check at every start (it costs under a second).
    small = tmp_path / "small"
    Store(small, create=True).close()
    with Store(small, create=True) as store, traced(store) as statements:
        assert store.check_index() == "ok"
    assert full_checks(statements) == 1


# ---------------------------------------------------------------------------- damage between starts
def test_a_garbage_page_is_found_in_the_background_and_repaired_at_the_next_start_without_a_crash_loop(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    objects = objects_of(200, size=500)
    remote = MemoryRemote(objects)
    cache = tmp_path / "cache"
    with sampling(cache, remote) as (store, _):
        wait_until(lambda: store.stats().samples == 200, what="every object admitted")
    garbage_on_a_middle_leaf(cache, "catalog")

    # The next start (as `epochfs sample` starts, a large index): the cheap check misses the page.
    with Store(cache, create=True) as store:
        assert store.check_index(full_below=0) == "ok"
    assert not list(cache.glob("index.sqlite.corrupt-*"))

    # The background check finds it and marks the index; the sampler's loop exits on the mark.
    stop = threading.Event()
    background = checkup.Background(IndexHandle(cache / INDEX_NAME, create=False), stop, every=0, duty=1.0)
    background.start()
    try:
        wait_until(lambda: background.found is not None, timeout=60, what="the damage found")
    finally:
        stop.set()
        background.join(timeout=30)
    assert "background integrity_check" in (checkmark.reason(cache) or "")
    ended = run_until_it_ends(cache, remote)
    # What `epochfs sample` exits 1 on (the supervisor starts it again).
    assert len(ended) == 1 and isinstance(ended[0], (StoreError, sqlite3.DatabaseError)), ended
    assert "damaged" in str(ended[0]) or "malformed" in str(ended[0])

    # The next start checks in full, replaces the index in one line, and the sampler samples again.
    caplog.set_level(logging.ERROR, logger="epochfs.store")
    with Store(cache, create=True) as store:
        problem = store.check_index(full_below=0)
        assert problem != "ok"
        store.recover(integrity="ok")
    damaged = [r.getMessage() for r in caplog.records if "is damaged" in r.getMessage()]
    assert len(damaged) == 1 and "moved aside to index.sqlite.corrupt-" in damaged[0], damaged
    assert checkmark.reason(cache) is None
    with sampling(cache, remote) as (store, _):
        wait_until(lambda: store.stats().samples == 200, what="every object fetched again")
    # And the start after that is an ordinary one: cheap, nothing to repair (no loop).
    with Store(cache, create=True) as store, traced(store) as statements:
        assert store.check_index(full_below=0) == "ok"
    assert full_checks(statements) == 0
    aside = [p for p in cache.glob("index.sqlite.corrupt-*") if not p.name.endswith(("-wal", "-shm"))]
    assert len(aside) == 1, "one repair, then ordinary starts"
    assert index_rows(cache, "PRAGMA integrity_check") == [("ok",)]
    verify_cache(cache, objects)


def test_a_corruption_error_in_normal_operation_marks_the_index_for_the_next_start(tmp_path: Path) -> None:
    objects = objects_of(200, size=500)
    cache = tmp_path / "cache"
    with sampling(cache, MemoryRemote(objects)) as (store, _):
        wait_until(lambda: store.stats().samples == 200, what="every object admitted")
    garbage_on_a_middle_leaf(cache, "samples")
    assert checkmark.reason(cache) is None
    # A reader (the FUSE server, epochfs status, a scrub) hits the page.
    with Store(cache) as store, pytest.raises(sqlite3.DatabaseError, match="malformed"):
        store.stored_objects(after_id=0, limit=1000)
    reason = checkmark.reason(cache)
    assert reason is not None and "malformed" in reason
    with Store(cache, create=True) as store:
        assert store.check_index(full_below=0) != "ok", "the mark forced the full check"
        assert store.stats().samples == 0
    assert checkmark.reason(cache) is None


def test_a_mark_left_by_another_process_ends_the_running_sampler_and_the_next_start_checks_in_full(
        tmp_path: Path) -> None:
    objects = objects_of(20, size=500)
    remote = MemoryRemote(objects)
    cache = tmp_path / "cache"

    with sampling(cache, remote) as (store, _):
        wait_until(lambda: store.stats().samples == 20, what="every object admitted")

    def marked(store: Store) -> None:
        # The FUSE server's connection got "malformed" from SQLite (the index is fine here).
        checkmark.mark(cache, "DatabaseError: database disk image is malformed")

    ended = run_until_it_ends(cache, remote, marked)
    assert len(ended) == 1 and isinstance(ended[0], StoreError), ended
    assert "damaged" in str(ended[0]) and "next start" in str(ended[0])
    with Store(cache, create=True) as store:
        with traced(store) as statements:
            assert store.check_index(full_below=0) == "ok", "nothing was wrong: nothing replaced"
        assert full_checks(statements) == 1 and store.stats().samples == 20
    assert checkmark.reason(cache) is None and not list(cache.glob("index.sqlite.corrupt-*"))
