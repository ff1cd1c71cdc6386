"""``.epochfs/classes.json`` records a new epoch's folders in bounded tries for the index's write lock,
letting the server's store connection go between them: while the sampler holds the write lock, the
server's other requests on that connection (status.json's totals, manifests, cuts on lookup) are
answered meanwhile, and the classes are recorded once the lock is free.

Before, the record waited out SQLite's whole busy timeout (30 s) holding the connection's lock, so a
reader's first look at ``classes.json`` after a cut stalled every other request of the server for as
long as the sampler wrote, and past 30 s answered EIO."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

from fuse_helpers import admit, make_objects, open_store

from epochfs.fuse.classes import ClassesFile
from epochfs.fuse.view import View
from epochfs.sidecar.store import classes
from epochfs.sidecar.store.listings import Part

LINK_ROOT = Path("/cache/objects-ro")
HELD = 20.0  # seconds the sampler's stand-in may hold the write lock: far more than a try's 250 ms


def _free(lock: threading.RLock) -> bool:
    """Whether no other thread holds ``lock`` now."""
    if not lock.acquire(blocking=False):
        return False
    lock.release()
    return True


def test_other_requests_are_answered_while_a_classes_record_waits_for_the_write_lock(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache")
    try:
        admit(store, make_objects(2, 8, prefix="train/cat/")
              | make_objects(2, 8, prefix="train/dog/", start=2))
        assert store.cut(0) == 0
        view = View(store=store, link_root=LINK_ROOT)
        sampler = sqlite3.connect(tmp_path / "cache" / "index.sqlite", isolation_level=None)
        sampler.execute("BEGIN IMMEDIATE")  # the sampler's long write transaction
        classes: dict[str, bytes] = {}
        reader = threading.Thread(
            target=lambda: classes.update(body=view.read_file("/.epochfs/classes.json")))
        reader.start()
        try:
            # The record is waiting once it holds the connection (its first try does).
            while reader.is_alive() and _free(store._ix.lock):
                threading.Event().wait(0.001)
            other: dict[str, object] = {}
            status = threading.Thread(target=lambda: other.update(stats=store.stats()))
            status.start()
            status.join(timeout=HELD)
            answered_while_held = not status.is_alive()
        finally:
            sampler.execute("COMMIT")
            sampler.close()
        reader.join(timeout=60)
        status.join(timeout=60)
        assert answered_while_held, "status waited for the classes record, which waited for the write lock"
        assert other["stats"] is not None
        assert not reader.is_alive()
        assert json.loads(classes["body"])["classes"]["train"] == {"cat": 0, "dog": 1}, classes
    finally:
        store.close()


def test_a_listings_folders_found_while_the_index_is_busy_are_recorded_at_a_later_tick(
        tmp_path: Path) -> None:
    """The refresher's tick tries once; the folders it found then are kept for the next tick, which
    may come after the listing ended and its parts (which name them) are gone."""
    store = open_store(tmp_path / "cache")
    try:
        parts = [Part(0, "train/ant/", "", None), Part(1, "train/bee/", "", None)]
        gen = store.listings().begin(parts, "list")
        names = ClassesFile(store)
        sampler = sqlite3.connect(tmp_path / "cache" / "index.sqlite", isolation_level=None)
        sampler.execute("BEGIN IMMEDIATE")
        try:
            names.tick()  # busy: nothing recorded now
            assert classes.read(tmp_path / "cache").folders == ()
        finally:
            sampler.execute("COMMIT")
            sampler.close()
        store.listings().finish(gen)
        assert store.listed_class_folders() == []
        names.tick()
        assert set(classes.read(tmp_path / "cache").folders) == {"train", "train/ant", "train/bee"}
    finally:
        store.close()
