"""Rows of an epoch's file list that cannot be shown safely are left out of the folder view too.

The FUSE view's tree builder skips (counts, logs) a row whose path is unsafe, whose sample id
would make its symlink point outside the link root, or whose path or checksum holds a manifest
separator (tab, newline). The folder view's tree built ahead must apply that same rule: a row it
linked anyway would point outside the cache or show what the FUSE view hides, and a row that
made it give up would cost a whole build at every cut. Here such rows are written into a real
index and the epoch is published by two real folder views (built ahead and whole) into real folders.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

import pytest
from folderview_helpers import pair, same_epoch, settle, tree_of
from fuse_helpers import admit, make_objects, open_store

ROWS = {  # which rows of the new samples are made unsafe, and how
    "escaping sid": {1: ("sid", "../../../../../../../../etc/passwd")},
    "all": {1: ("sid", "../../../../../../../../etc/passwd"), 3: ("path", "{key}\tx"),
            5: ("checksum", "md5:0\n" + "0" * 31), 6: ("path", "b/../../{key}")},
}


@pytest.mark.parametrize("rows", sorted(ROWS))
def test_rows_the_fuse_view_hides_are_skipped_and_counted_by_the_tree_built_ahead(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, rows: str) -> None:
    cache = tmp_path / "cache"
    store = open_store(cache)
    admit(store, make_objects(10, 20, prefix="a/", seed=1))
    store.cut(0)
    ahead, whole = pair(store, tmp_path)
    settle(ahead)
    objects = make_objects(8, 20, prefix="b/", seed=2, start=10)
    admit(store, objects)
    keys = sorted(objects)
    unsafe = [keys[i] for i in ROWS[rows]]
    db = sqlite3.connect(cache / "index.sqlite")
    with db:
        for i, (column, value) in ROWS[rows].items():
            db.execute(f"UPDATE samples SET {column}=? WHERE key=?", (value.format(key=keys[i]), keys[i]))
    db.close()
    caplog.set_level(logging.INFO)
    settle(ahead)
    n = store.cut(store.next_epoch())
    assert n == 1
    caplog.clear()
    step = ahead.step()
    whole.step()
    assert step.published == [1] and step.ahead == [1], caplog.text  # no fallback to a whole build
    same_epoch(ahead, whole, 1)  # the FUSE view's rule: the same rows left out
    tree = tree_of(ahead.folder / "epoch-1")
    shown = sorted(rel for rel in tree if rel.startswith("b/") and not rel.endswith("/"))
    assert shown == [k for k in keys if k not in unsafe]
    for rel, target in tree.items():
        if not rel.endswith("/"):
            assert os.path.normpath(target).startswith("/efs/"), (rel, target)
    manifest = (ahead.folder / ".epochfs" / "epoch-1.manifest").read_text()
    assert manifest.startswith(f"#epochfs-manifest v1\tepoch=1\tfiles={18 - len(unsafe)}\t"), manifest[:80]
    # Counted and logged by the folder view itself (the whole build's tree builder logs its own).
    assert ahead._ahead.tree is not None and ahead._ahead.tree.skipped == len(unsafe)
    ours = [r.getMessage() for r in caplog.records if r.name == "epochfs.folderview"]
    assert f"epoch 1: {len(unsafe)} of 18 file(s) not shown (unsafe paths, link targets or checksums)" in ours
    store.close()
