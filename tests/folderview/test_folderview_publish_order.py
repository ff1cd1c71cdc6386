"""What a trainer can see while the folder view publishes: the grace record of a published epoch
survives a busy index, and a lost sample's placeholder is in the epoch before ``epoch-N/`` appears.

Both with a real store and publisher. The busy index is a second real writer holding the index's
write lock (as the sampler does during a long admission). The moment between the publisher's
writes is observed with an audit hook (:func:`sys.addaudithook`): it runs before each file
operation of the publisher, so it sees the folder as a reader could between any two of them,
without changing what the publisher does."""

from __future__ import annotations

import contextlib
import errno
import io
import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from common import wait_until
from fuse_helpers import admit, open_store
from lost_helpers import make_lost

from epochfs.sidecar.folderview import FolderPublisher
from epochfs.sidecar.store import INDEX_NAME, Store
from epochfs.torchclient.lost import is_placeholder

LOST = "train/b/0009.npy"


def npy_objects(count: int, first: int = 0) -> dict[str, bytes]:
    out = {}
    for i in range(first, first + count):
        buf = io.BytesIO()
        np.save(buf, np.full(16, i, dtype=np.float32))
        out[f"train/{'ab'[i % 2]}/{i:04d}.npy"] = buf.getvalue()
    return out


def publisher_for(store: Store, folder: Path, *, ahead: bool) -> FolderPublisher:
    return FolderPublisher(store=store, folder=folder, link_root=store.objects_dir.absolute(), ahead=ahead)


def settle(p: FolderPublisher) -> None:
    for _ in range(1000):
        if not p.step().pending:
            return
    raise AssertionError("the tree built ahead never settled")


_ON_OP: list[Callable[[str, tuple[Any, ...]], None]] = []
_IN_HOOK = threading.local()


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _ON_OP or getattr(_IN_HOOK, "on", False) or not event.startswith(("os.", "open")):
        return
    _IN_HOOK.on = True
    try:
        for call in list(_ON_OP):
            call(event, args)
    finally:
        _IN_HOOK.on = False


sys.addaudithook(_audit)  # a hook stays for the process: it does nothing while _ON_OP is empty


@contextlib.contextmanager
def on_each_op(call: Callable[[str, tuple[Any, ...]], None]) -> Iterator[None]:
    """Run ``call`` before every file operation of this process meanwhile: it sees the folder as a
    reader could between any two of the publisher's operations, without changing what it does."""
    _ON_OP.append(call)
    try:
        yield
    finally:
        _ON_OP.remove(call)


@contextlib.contextmanager
def busy_once_manifest_is_in_place(store: Store, n: int) -> Iterator[None]:
    """Another writer (the sampler, in a pod) takes the index's write lock right after epoch
    ``n``'s manifest is renamed into place (after the publisher recorded its class folders, before
    the epoch appears) and holds it until the block ends."""
    db = sqlite3.connect(store.root / INDEX_NAME, isolation_level=None, timeout=0)
    taken: list[bool] = []

    def take(event: str, args: tuple[Any, ...]) -> None:
        if not taken and event == "os.rename" and str(args[1]).endswith(f"epoch-{n}.manifest"):
            db.execute("BEGIN IMMEDIATE")
            taken.append(True)

    try:
        with on_each_op(take):
            yield
        assert taken, f"epoch {n}'s manifest was not written"
        db.execute("ROLLBACK")
    finally:
        db.close()


def last_read(store: Store, n: int) -> float:
    db = sqlite3.connect(store.root / INDEX_NAME)
    try:
        return float(db.execute("SELECT last_read FROM epochs WHERE n=?", (n,)).fetchone()[0])
    finally:
        db.close()


@pytest.mark.parametrize("ahead", [False, True], ids=["written-whole", "built-ahead"])
def test_a_grace_record_the_busy_index_refused_is_written_at_a_later_step(tmp_path: Path,
                                                                        ahead: bool) -> None:
    """The publisher pins each epoch it shows for ``in_use_seconds`` (readers it cannot see). When
    the index is busy at that moment the record fails; the publisher must try again at its next
    steps, or the epoch is retired at the next cut although it appeared a moment ago (and its
    objects may be evicted under a reader). Before the fix the failed record was dropped."""
    store = open_store(tmp_path / "cache", keep_epochs=1, in_use_seconds=300)
    try:
        admit(store, npy_objects(8))
        assert store.cut(0) == 0
        publisher = publisher_for(store, tmp_path / "view", ahead=ahead)
        publisher.recover()
        n = 0
        if ahead:  # epoch 1 comes from the tree built ahead
            publisher.step(force_status=True)
            settle(publisher)
            admit(store, npy_objects(4, first=8))
            settle(publisher)
            assert store.cut(1, force=True) == 1
            n = 1
        with busy_once_manifest_is_in_place(store, n):
            done = publisher.step(force_status=True)
        assert done.published == [n] and done.ahead == ([n] if ahead else [])
        assert last_read(store, n) == 0.0, "the record was refused (the index was busy)"
        publisher.step()  # nothing new in the store: the cheap step retries it
        assert last_read(store, n) > 0.0, "the grace record was tried again"
        admit(store, npy_objects(2, first=20))
        assert store.cut(n + 1, force=True) == n + 1
        assert n not in store.retire(), "the epoch just shown keeps its grace"
        publisher.step()
        assert (publisher.folder / f"epoch-{n}").is_dir()
        publisher.close()
    finally:
        store.close()


def test_a_grace_record_is_retried_while_refused_and_dropped_for_a_retired_epoch(tmp_path: Path) -> None:
    """A refused record stays due over several refused tries; one for an epoch the store retired
    before the next try is dropped (nothing to pin)."""
    store = open_store(tmp_path / "cache", keep_epochs=1, in_use_seconds=300)
    try:
        admit(store, npy_objects(8))
        assert store.cut(0) == 0
        publisher = publisher_for(store, tmp_path / "view", ahead=False)
        publisher.recover()
        with busy_once_manifest_is_in_place(store, 0):
            publisher.step(force_status=True)
            publisher.step()
            publisher.step()
        assert publisher.grace_due() == [0] and last_read(store, 0) == 0.0
        admit(store, npy_objects(2, first=20))
        assert store.cut(1, force=True) == 1
        assert store.retire() == [0]  # the sampler, before the next step: out of the newest 1
        publisher.step()
        assert publisher.grace_due() == [], "epoch 0's record dropped, epoch 1's written"
        assert last_read(store, 0) == 0.0 and last_read(store, 1) > 0.0
        assert not (publisher.folder / "epoch-0").exists()
        publisher.close()
    finally:
        store.close()


def test_a_grace_record_is_not_written_once_the_grace_is_over(tmp_path: Path) -> None:
    """A record refused until the grace would have ended is dropped: written late, it would pin
    the epoch for a whole grace more."""
    store = open_store(tmp_path / "cache", keep_epochs=1, in_use_seconds=0.3)
    try:
        admit(store, npy_objects(8))
        assert store.cut(0) == 0
        publisher = publisher_for(store, tmp_path / "view", ahead=False)
        publisher.recover()
        with busy_once_manifest_is_in_place(store, 0):
            publisher.step(force_status=True)
            assert publisher.grace_due() == [0]
            wait_until(lambda: (publisher.step(), publisher.grace_due())[1] == [], timeout=20,
                       what="the grace to end")
        publisher.step()
        assert last_read(store, 0) == 0.0
        publisher.close()
    finally:
        store.close()


def seen_entry(epoch: Path, rel: str, seen: list[str]) -> Callable[[str, tuple[Any, ...]], None]:
    """What a reader finds at ``epoch/rel`` before each operation, once the epoch is shown."""

    def look(_event: str, _args: tuple[Any, ...]) -> None:
        try:
            target = os.readlink(epoch / rel)
        except FileNotFoundError:
            if epoch.exists():
                seen.append("missing")
            return
        seen.append("placeholder" if is_placeholder(epoch / rel) else f"link to {target}")

    return look


@pytest.mark.parametrize("ahead", [False, True], ids=["written-whole", "built-ahead"])
def test_an_epoch_cut_after_a_loss_appears_with_its_placeholder_in_place(tmp_path: Path, ahead: bool) -> None:
    """A trainer listing ``epoch-N/`` the moment it appears must find the lost sample's
    placeholder (ELOOP, ``SampleLostError``), never the dangling link to the object file that is
    gone (ENOENT: 'missing, retry'). Before the fix the placeholder was put in after the rename."""
    store = open_store(tmp_path / "cache", keep_epochs=3)
    folder = tmp_path / "view"
    try:
        admit(store, npy_objects(24))
        assert store.cut(0) == 0 and store.cut(1, force=True) == 1
        publisher = publisher_for(store, folder, ahead=ahead)
        publisher.recover()
        publisher.step(force_status=True)
        settle(publisher)  # the tree built ahead links epoch 1's entries, the lost one's included
        make_lost(store, LOST)
        publisher.step(force_status=True)
        settle(publisher)
        assert is_placeholder(folder / "epoch-1" / LOST)
        assert store.cut(2, force=True) == 2
        seen: list[str] = []
        with on_each_op(seen_entry(folder / "epoch-2", LOST, seen)):
            done = publisher.step()
        assert done.published == [2] and done.ahead == ([2] if ahead else [])
        assert is_placeholder(folder / "epoch-2" / LOST)
        assert seen, "the hook saw the epoch after it appeared"
        assert set(seen) == {"placeholder"}, sorted(set(seen))
        publisher.close()
    finally:
        store.close()


def test_the_manifest_of_an_epoch_that_never_appeared_goes_when_the_epoch_retires(tmp_path: Path) -> None:
    """A publish that fails after the manifest (a full volume: ENOSPC at a link, made here by the
    audit hook refusing the operation) leaves ``.epochfs/epoch-N.manifest`` without its folder; it
    is tried again, and when the store retires the epoch first, the manifest must go with it
    instead of staying until the next start (a manifest without its epoch)."""
    store = open_store(tmp_path / "cache", keep_epochs=1, in_use_seconds=300)
    folder = tmp_path / "view"
    try:
        admit(store, npy_objects(8))
        assert store.cut(0) == 0
        publisher = publisher_for(store, folder, ahead=False)
        publisher.recover()
        publisher.step(force_status=True)
        admit(store, npy_objects(2, first=20))
        assert store.cut(1, force=True) == 1

        def full(event: str, _args: tuple[Any, ...]) -> None:
            if event == "os.symlink":
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        with on_each_op(full), pytest.raises(OSError) as raised:
            publisher.step()
        assert raised.value.errno == errno.ENOSPC
        assert (folder / ".epochfs" / "epoch-1.manifest").exists() and not (folder / "epoch-1").exists()
        admit(store, npy_objects(2, first=30))
        assert store.cut(2, force=True) == 2
        assert store.retire(now=time.time() + 1000) == [0, 1]
        done = publisher.step()
        assert done.published == [2] and done.retired == [0]
        assert sorted(os.listdir(folder / ".epochfs")) == ["classes.json", "epoch-2.manifest", "status.json"]
        assert sorted(n for n in os.listdir(folder) if not n.startswith(".")) == ["epoch-2", "latest"]
        publisher.close()
    finally:
        store.close()
