"""The FUSE server's per-epoch bookkeeping is bounded by the live epochs, however many are cut.

A long-lived sidecar with a short cut interval cuts, reads and retires thousands of epochs. The
view's trees and manifests, and the inode shapes, are kept for live epochs only; so must be the
read debounce dates (``EpochReads``) and the warm-up's records (``Warmer.warmed`` and the epochs
it was asked for), which untrimmed keep one entry per epoch ever read for the life of the mount
(~165 B each: 7 MB a day at one cut every 2 s). Here 300 epochs are cut, read and retired in
turn through a real store and view, with the warm-up reading through a real child process, and
the records must not hold more than the live epochs and a couple more.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from fuse_helpers import admit, make_objects, open_store

from epochfs.fuse.libfuse import find_libfuse3
from epochfs.fuse.view import View
from epochfs.sidecar.store import Store

os.environ.setdefault("FUSE_LIBRARY_PATH", find_libfuse3())
# mfusepy binds libfuse when imported: choose libfuse 3 first.
from epochfs.fuse.kernelcache import Refresher, Warmer

CUTS = 300
MARGIN = 2
"""Beyond the live epochs: one cut since the refresh that trimmed (kept on purpose, so a new epoch
is not warmed twice)."""
WARM_SECONDS = 20.0


def _view(tmp_path: Path) -> tuple[Store, View]:
    cache = tmp_path / "cache"
    store = open_store(cache, keep_epochs=2, in_use_seconds=0.0)
    admit(store, make_objects(20, 64))
    return store, View(store=store, link_root=cache / "objects", read_debounce=0.0)


def _retire(store: Store) -> None:
    """Retire what the policy lets go (two epochs kept; the in-use window, 0 s, has passed)."""
    store.retire(now=time.time() + 1.0)


def test_read_dates_forget_retired_epochs(tmp_path: Path) -> None:
    store, view = _view(tmp_path)
    most_live = 0
    for n in range(CUTS):
        assert store.cut(n, force=True) == n
        view.refresh()
        view.getattr(f"/epoch-{n}")          # a trainer's stat: notes a read of n
        view.listdir(f"/epoch-{n}/train")    # and its listing
        assert view.flush_reads() == [n]
        _retire(store)
        view.refresh()
        most_live = max(most_live, len(view.snapshot.live))
    kept = len(view.reads._last_recorded)
    assert 1 <= most_live <= 2, f"the policy kept {most_live} epochs: this test expects two"
    assert kept <= most_live + MARGIN, f"{kept} read dates kept for {most_live} live epochs"


def _epoch_folder(mount: Path, n: int) -> None:
    """What the warm-up reads of epoch ``n``: its folder with a link in it (a plain folder here:
    the warm-up only walks paths and reads links)."""
    folder = mount / f"epoch-{n}" / "train"
    folder.mkdir(parents=True)
    (folder / "a.bin").symlink_to("/nowhere/a.bin")


def _warmed(warmer: Warmer, n: int) -> None:
    """Wait (polling) until the warm-up child answered for epoch ``n``."""
    deadline = time.monotonic() + WARM_SECONDS
    while n not in warmer.warmed:
        assert time.monotonic() < deadline, f"epoch {n} was not warmed in {WARM_SECONDS}s"
        time.sleep(0.005)  # a poll's pace: the condition is re-read


def test_the_warm_up_forgets_retired_epochs(tmp_path: Path) -> None:
    store, view = _view(tmp_path)
    mount = tmp_path / "mnt"
    warmer = Warmer(view=view, mount=mount)
    refresher = Refresher(view=view, interval=0.5, warmer=warmer)
    most_live = 0
    try:
        for n in range(CUTS):
            assert store.cut(n, force=True) == n
            _epoch_folder(mount, n)
            refresher.tick()
            warmer.request(n)      # the server asks at an epoch folder's first lookup
            _warmed(warmer, n)
            assert warmer.warmed[n] == 1
            _retire(store)
            refresher.tick()       # the retired epochs leave the mount
            most_live = max(most_live, len(view.snapshot.live))
    finally:
        warmer.stop()
    assert 1 <= most_live <= 2, f"the policy kept {most_live} epochs: this test expects two"
    requested, warmed = len(warmer._requested), len(warmer.warmed)
    assert requested <= most_live + MARGIN, f"{requested} warm-up requests kept for {most_live} live epochs"
    assert warmed <= most_live + MARGIN, f"{warmed} warm-up counts kept for {most_live} live epochs"


def test_the_warm_up_keeps_an_epoch_newer_than_the_live_ones(tmp_path: Path) -> None:
    """An epoch cut after the refresh read the live set is not taken for retired: its warm-up
    would run a second time at its next lookup."""
    store, view = _view(tmp_path)
    warmer = Warmer(view=view, mount=tmp_path / "mnt")
    try:
        assert store.cut(0, force=True) == 0
        view.refresh()
        warmer.request(1)  # cut on lookup after the refresh: not in the live set yet
        warmer.forget_retired(view.snapshot.live)
        assert 1 in warmer._requested
    finally:
        warmer.stop()
