"""Schedule mode's window built ahead leaves out the rows the FUSE view's tree builder leaves out
(a sample id whose link would point outside the cache, a tab in a path), as the snapshot mode's
tree built ahead does (``test_folderview_unsafe_rows.py``): the epoch is shown from the tree built
ahead, identical to a whole build, every link inside the link root."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from folderview_helpers import pair, same_epoch, settle, tree_of
from fuse_helpers import make_objects
from test_folderview_window import admit, schedule_store

from epochfs.sidecar.folderview_window import WindowTree


def test_a_windows_unsafe_rows_are_skipped_and_counted(tmp_path: Path) -> None:
    objects = make_objects(60, 100, prefix="train/a/", seed=3)
    store, _, order = schedule_store(tmp_path, objects)
    ahead, whole = pair(store, tmp_path)
    settle(ahead)
    lo, hi = store.schedule_window(0)
    window = order[lo:hi]
    admit(store, {k: objects[k] for k in window})
    bad = {window[1]: ("sid", "../../../../../../../../etc/passwd"), window[4]: ("path", "{key}\tx")}
    db = sqlite3.connect(tmp_path / "cache" / "index.sqlite")
    with db:
        for key, (column, value) in bad.items():
            db.execute(f"UPDATE samples SET {column}=? WHERE key=?", (value.format(key=key), key))
    db.close()
    settle(ahead)
    assert store.cut(0) == 0
    step = ahead.step()
    whole.step()
    assert step.published == [0] and step.ahead == [0]  # no fallback to a whole build
    same_epoch(ahead, whole, 0)
    tree = tree_of(ahead.folder / "epoch-0")
    shown = sorted(rel for rel in tree if not rel.endswith("/"))
    assert shown == sorted(k for k in window if k not in bad)
    for rel, target in tree.items():
        if not rel.endswith("/"):
            assert os.path.normpath(target).startswith("/efs/"), (rel, target)
    assert isinstance(ahead._ahead.tree, WindowTree) and ahead._ahead.tree.skipped == len(bad)
    store.close()
