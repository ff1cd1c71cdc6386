"""The folder view under a burst of cuts with a slow publisher: ``latest`` stays, and an epoch cut
on request waits to be shown.

Why: a publisher that writes epochs slower than they are cut finds, at its turn, that the newest
epoch of its snapshot retired meanwhile (not the newest any more, never shown, so never read).
``latest`` must then stand for the newest epoch it did show, not vanish while epoch folders are
there. An epoch cut on ``/v1/cut`` is for a client about to read it: its read is dated ahead, so it
outlives the publisher's delay and is shown (``sidecar/cutrequest.py``).

Real store and real publisher in one process; the slow publisher is made deterministic by letting
the store go on (a cut, a retirement) at the moment a slow write would have let it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from fuse_helpers import admit, make_objects, open_store

from epochfs.sidecar import cutrequest
from epochfs.sidecar.cutrequest import CutRequest
from epochfs.sidecar.folderview import FolderPublisher
from epochfs.sidecar.served_pins import CLIENT_AHEAD
from epochfs.sidecar.store import Store
from epochfs.torchclient import layout


class Overtaken(FolderPublisher):
    """A publisher as slow as a big epoch makes it: while it writes epoch ``slow_at`` the store cuts
    another epoch and retires what nothing holds, as the sampler does in a burst of cuts."""

    def __init__(self, store: Store, folder: Path, slow_at: int) -> None:
        super().__init__(store=store, folder=folder, link_root=store.objects_dir)
        self.cuts = store
        self.slow_at = slow_at
        self.overtaken: list[int] = []

    def _publish(self, n: int) -> bool:
        if n == self.slow_at:
            self.cuts.cut()
            self.overtaken = self.cuts.retire()
        return super()._publish(n)


def latest_names_a_shown_epoch(folder: Path) -> None:
    """Whenever an epoch folder is there, ``latest`` is a symlink to one that is."""
    shown = layout.list_epochs(folder)
    if not shown:
        return
    latest = folder / "latest"
    assert latest.is_symlink(), f"epochs {shown} shown without latest"
    target = os.readlink(latest)
    assert (folder / target).is_dir() and layout.parse_epoch_name(target) in shown, (target, shown)


def test_latest_falls_back_to_the_newest_shown_epoch_when_the_newest_retired_unshown(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache", keep_epochs=1, in_use_seconds=100.0)
    admit(store, make_objects(4, 10))
    folder = tmp_path / "view"
    p = Overtaken(store, folder, slow_at=2)
    p.recover()
    store.cut(0)
    assert p.step().published == [0]
    store.cut(1)
    store.cut(2)
    step = p.step()  # while it writes 2, epoch 3 is cut and 2 (newest of its snapshot) retires
    assert p.overtaken == [2] and step.published == [1]
    latest_names_a_shown_epoch(folder)
    assert os.readlink(folder / "latest") == "epoch-1" and step.latest == 1
    step = p.step()  # the next step shows 3 and moves latest on
    assert step.published == [3] and os.readlink(folder / "latest") == "epoch-3"
    latest_names_a_shown_epoch(folder)
    store.close()


def test_an_epoch_cut_on_request_outlives_the_window_until_shown_then_keeps_its_grace(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache", keep_epochs=1, in_use_seconds=1.0)
    admit(store, make_objects(4, 10))
    code, doc = cutrequest.answer(store, CutRequest(0), read_ahead=CLIENT_AHEAD)
    assert (code, doc["state"]) == (200, "live")
    store.cut(1)  # a burst: the epoch asked for is not the newest any more, and not shown yet
    assert store.retire(now=time.time() + 2.0) == []  # past the window: the asker's read holds it
    p = FolderPublisher(store=store, folder=tmp_path / "view", link_root=store.objects_dir)
    p.recover()
    assert p.step().published == [0, 1]
    # Shown: the publisher's grace record (dated now) does not cut the asker's lead short; the
    # epoch goes once both have ended.
    assert store.retire(now=time.time() + 2.0) == []
    assert store.retire(now=time.time() + CLIENT_AHEAD + 2.0) == [0]
    store.close()
