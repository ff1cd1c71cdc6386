"""A folder held open keeps its epoch with any ``--in-use-seconds``, 0 and sub-second windows
included (docs/mount.md: "for as long as the handle is open, however long the reader pauses").

The view renews a held epoch's read record at each refresh, but recorded as read *now* the epoch
was live only while ``now - last_read < window``: never for a window of 0, and not between two
renewals for 0.3 s, so an epoch with a folder open retired under its reader, its objects evicted.
A held epoch's read is now dated past its next renewal. A real store and view; the refresher's
two steps called as its tick calls them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fuse_helpers import admit, make_objects, open_store

from epochfs.fuse.view import View


@pytest.mark.parametrize("window", [0.0, 0.3])
def test_an_epoch_with_a_folder_open_outlives_a_short_window(tmp_path: Path, window: float) -> None:
    store = open_store(tmp_path / "cache", keep_epochs=1, in_use_seconds=window)
    admit(store, make_objects(5, 10))
    assert store.cut(0) == 0
    view = View(store=store, link_root=tmp_path / "cache" / "objects", read_debounce=window / 6)
    assert view.open_dir("/epoch-0") == 0  # a reader's folder handle (opendir)
    assert store.cut(1) == 1  # epoch 0 is no longer among the newest --keep-epochs 1
    view.renew_held()
    view.flush_reads()
    # The next renewal comes within a refresh (0.5 s) and the debounce: a second later, with the
    # folder still open and no renewal yet, the epoch must be live.
    assert store.retire(now=time.time() + 1.0) == [], "the epoch a reader holds open retired"
    view.close_dir(0)
    store.close()


def test_an_epoch_read_but_not_held_still_retires_after_the_window(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache", keep_epochs=1, in_use_seconds=0.0)
    admit(store, make_objects(5, 10))
    assert store.cut(0) == 0
    view = View(store=store, link_root=tmp_path / "cache" / "objects", read_debounce=0.0)
    view.note_read(0)
    view.flush_reads()
    assert store.cut(1) == 1
    assert store.retire(now=time.time() + 1.0) == [0], "a read with a window of 0 pins nothing"
    store.close()
