"""The folder view's publisher: :class:`FolderPublisher` writes the view of a store into a folder.

**One layout, one renderer.** What the folder holds is rendered by :class:`epochfs.fuse.view.View`,
the namespace the FUSE server serves (epoch trees with its path rules, manifests, ``latest``,
``status.json`` in the formats of :mod:`epochfs.torchclient.layout`); this module only writes it
down. So for the same store the two views show the same epochs, entries, targets and manifests by
construction, and ``tests/folderview/test_folderview_equivalence.py`` checks it against a real mount.

**A reader never sees half of anything.** An epoch is built under a dot-prefixed temporary name
(readers and ``layout.list_epochs`` ignore it): its manifest is written first (temp file, fsync,
rename into ``.epochfs/``), then its folders and symlinks, each folder fsynced, then one
``rename`` makes ``epoch-N/`` appear whole; or it is shown from the tree built ahead
(:mod:`.folderview_ahead`), which keeps the same order. ``latest`` and ``status.json`` are replaced
by temp + rename. These steps have one home, :mod:`epochfs.torchclient.publish`, which the torch
client's :mod:`~epochfs.torchclient.plainfolder` (epochs in a plain folder, without a sidecar)
calls too. A retired epoch is renamed away before its manifest goes and its files are
removed, so ``epoch-N/`` is either complete or absent. After a crash (``kill -9``) :meth:`recover`
removes the leftovers (temporary names), every epoch the store no longer holds, and any visible
epoch that does not match the store (another cache, another link root); it never touches an epoch
a reader may be using, nor an ``epoch-N/`` it did not write (:func:`.volumes.published_epoch`: a
user's folder of that name is left, with a warning; the start check refuses a ``--mount`` that is
not empty unless the publisher wrote it). Nor is such a folder ever taken for the epoch: a live
epoch whose name a user's folder holds is not published, ``latest`` never points at it, and it is
reported (:attr:`FolderPublisher.blocked`, an error in the log) until the folder is moved away.

**Retirement follows the store.** Without FUSE nothing sees a reader's lookups or opens, so "in
use" comes from what the store records: the newest ``keep_epochs``, the reads reported by the torch
client (``/v1/client-report?epoch=N``, ``/v1/cut``), and a grace period: each epoch is recorded as
read just before it appears, so it stays for at least ``in_use_seconds`` (default 600 s) even when
no client reports; a record the busy or full index refused is tried again at each step
(:mod:`.folderview_grace`). The folder of an epoch is removed once the store has retired it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Collection, Sequence
from pathlib import Path

from epochfs.fuse.view import View
from epochfs.sidecar.folderview_ahead import AheadTree
from epochfs.sidecar.folderview_aheadrun import AheadRun
from epochfs.sidecar.folderview_built import FULL_ERRNOS, WriteControl
from epochfs.sidecar.folderview_classes import render_classes
from epochfs.sidecar.folderview_grace import Grace
from epochfs.sidecar.folderview_lock import make_folder
from epochfs.sidecar.folderview_lost import LostRecord
from epochfs.sidecar.folderview_owned import Owned
from epochfs.sidecar.folderview_remove import Remover
from epochfs.sidecar.folderview_reports import Recovery, Step
from epochfs.sidecar.folderview_window import WindowTree
from epochfs.sidecar.store.reader import FolderReader
from epochfs.torchclient.layout import (
    CLASSES_NAME,
    CONTROL_DIR,
    LATEST_NAME,
    STATUS_NAME,
    epoch_name,
    manifest_name,
    parse_epoch_name,
    parse_manifest_name,
)
from epochfs.torchclient.lost import is_placeholder
from epochfs.torchclient.publish import (
    CONTROL_TEMP_PREFIX,
    DIR_MODE,
    FILE_MODE,
    TEMP_PREFIX,
    NotASymlink,
    fsync_dir,
    fsync_file,
    link_target,
    move_symlink,
    publish_tree,
    remove_tree,
    replace_file,
    retire_tree,
)

log = logging.getLogger("epochfs.folderview")

__all__ = ["CONTROL_TEMP_PREFIX", "DIR_MODE", "FILE_MODE", "FULL_ERRNOS", "TEMP_PREFIX", "FolderPublisher"]

class FolderPublisher:
    """Writes the view of ``store`` into ``folder``; :meth:`step` brings the folder up to date."""

    def __init__(self, *, store: FolderReader, folder: Path, link_root: Path,
                 status_seconds: float = 1.0, grace: bool = True, ahead: bool = False,
                 background: bool | None = None) -> None:
        """``ahead``: build the next epoch's tree ahead (:mod:`.folderview_ahead`), so that a cut
        is shown by a rename; ``background`` (default: as ``ahead``): retired trees are removed
        on a thread, after they disappeared."""
        if not folder.is_absolute():
            raise ValueError(f"folder must be an absolute path, got {folder}")
        self.store = store
        self.folder = folder
        self.control = folder / CONTROL_DIR
        self.view = View(store=store, link_root=link_root)
        self.status_seconds = status_seconds
        self.grace = grace
        self._status_written = -1e18
        self._status_key = b""
        self._latest: int | None = None
        self._live_seen: frozenset[int] | None = None
        self._ahead = AheadRun(store=store, folder=folder, link_root=link_root, enabled=ahead,
                               newest=self._newest_shown)
        self._remover = Remover() if (ahead if background is None else background) else None
        self._lost = LostRecord(folder)  # lost samples' entries: placeholders answering ELOOP
        self._grace = Grace(store)
        self._unshown: set[int] = set()  # manifests written whose epoch a failed publish did not show
        self._owned = Owned(folder)  # the epoch-N/ it wrote; a user's of the same name never taken
        self._latest_taken = False  # a user's file or folder named latest, warned about

    @property
    def blocked(self) -> str | None:
        """Why a live epoch is not shown (a folder epochfs did not write holds its name), or None:
        recorded as the publisher's pause reason by :func:`.folderview.run_publish`."""
        return self._owned.blocked

    # ------------------------------------------------------------------ what is in the folder
    def visible(self) -> list[int]:
        """Epoch folders a reader sees now, ascending."""
        try:
            names = os.listdir(self.folder)
        except FileNotFoundError:
            return []
        return sorted(n for n in map(parse_epoch_name, names) if n is not None)

    # ------------------------------------------------------------------ start-up
    def recover(self) -> Recovery:
        """Clean what a killed publisher left: temporary names, epochs the store has retired,
        manifests without their epoch, and visible epochs that differ from the store's (another
        cache or link root: rebuilt by the next :meth:`step`). Every temporary name goes, so the
        process holds the folder's lock first (:mod:`.folderview_lock`): one publisher per folder."""
        make_folder(self.folder)  # a full volume raises (publishing pauses), else one line
        report = Recovery()
        self._ahead.forget()  # a temporary name: removed below, built again
        for name in sorted(os.listdir(self.folder)):
            if name.startswith(TEMP_PREFIX):
                remove_tree(self.folder / name)
                report.leftovers.append(name)
        for name in sorted(os.listdir(self.control)):
            if name.startswith(CONTROL_TEMP_PREFIX):
                (self.control / name).unlink(missing_ok=True)
                report.leftovers.append(f"{CONTROL_DIR}/{name}")
        self.view.refresh()
        live = self.view.snapshot.live
        visible = self.visible()
        stale = [n for n in visible if n not in live or not self._matches(n)]
        # latest first, to an epoch that stays, so it never points at one being removed.
        kept = [n for n in visible if n not in stale]
        self._owned.ours(set(kept))
        full = self._write_latest(max(kept) if kept else None, removing=set(stale))
        report.stale = [n for n in stale if self._retire(n)]
        report.foreign = [n for n in stale if n not in report.stale]  # a user's: never removed
        for name in os.listdir(self.control):
            mn = parse_manifest_name(name)
            if mn is not None and mn not in live:
                (self.control / name).unlink(missing_ok=True)
        if report.leftovers or report.stale:
            log.info("recovered %s: removed leftovers %s, stale epochs %s", self.folder,
                     report.leftovers, report.stale)
        if full is not None:
            raise full  # after the stale epochs went: the next try has their room
        return report

    def _matches(self, n: int) -> bool:
        """A visible epoch is the store's epoch n: same manifest, same first link target."""
        try:  # the store's side read whole in here: an epoch retired meanwhile is not a match
            manifest = (self.control / manifest_name(n)).read_bytes()
            tree = self.view.tree(n)
            if manifest != self.view.manifest(n):
                return False
        except (OSError, LookupError):
            return False
        first = next(iter(sorted(tree.links)), None)
        if first is None:
            return True
        try:
            entry = self.folder / epoch_name(n) / first
            return os.readlink(entry) == tree.links[first] or is_placeholder(entry)  # a lost sample's
        except OSError:
            return False

    def grace_due(self) -> list[int]:
        """Shown epochs whose grace record the index refused so far (tried again each step)."""
        return self._grace.due()

    # ------------------------------------------------------------------ one pass
    def step(self, *, force_status: bool = False) -> Step:
        """Publish new epochs, move ``latest``, rewrite ``status.json`` when due, retire the epochs
        the store retired. Cheap when nothing changed: one small query of the epochs table.

        A full volume (:data:`FULL_ERRNOS`) stops what needs room (publishing, a new ``latest``,
        ``status.json``), never what frees it: ``latest`` is moved off (or removed from) an epoch
        the store retired, the retired epochs and the manifests of epochs never shown go, and only
        then is the first such error raised (the caller pauses; its next try has their room)."""
        done = Step()
        live_now = frozenset(e.epoch for e in self.store.epochs())
        status_due = time.monotonic() - self._status_written >= self.status_seconds
        moved = self._owned.moved()
        if live_now == self._live_seen and not status_due and not force_status and not moved:
            self._grace.retry(live_now)  # never before a publish: a busy index would delay its show
            done.pending = self._ahead.advance(self._live_seen)
            return done
        self.view.refresh()
        snap = self.view.snapshot
        visible = set(self.visible())
        own = self._owned.ours(visible)
        blocked = sorted(n for n in snap.live if n in visible - own)  # a user's folder has its name
        full: OSError | None = None
        try:
            self._publish_new([n for n in sorted(snap.live) if n not in visible], done)
        except OSError as e:
            if e.errno not in FULL_ERRNOS:
                raise
            full = e  # the rest still runs: retiring frees the room the next try needs
        self._owned.report_blocked(blocked)
        latest = self._latest_of(snap.live, snap.latest, blocked)
        if latest != self._latest or not (self.folder / LATEST_NAME).is_symlink():
            missed = self._write_latest(latest, removing=visible - set(snap.live))
            full = full or missed
        done.latest = self._latest
        # Not while an epoch it counts is unshown: status.json keeps its version from before the pause.
        if full is None and (snap.status_key != self._status_key or status_due or force_status):
            try:
                self._replace_control(STATUS_NAME, snap.status, fsync=False)
                self._status_key, self._status_written = snap.status_key, time.monotonic()
            except OSError as e:
                if e.errno not in FULL_ERRNOS:
                    raise
                full = e
        pointed = parse_epoch_name(link_target(self.folder / LATEST_NAME) or "")
        for n in sorted(visible - set(snap.live)):
            if n != pointed and self._retire(n):
                done.retired.append(n)
        for n in sorted(self._unshown - set(snap.live)):  # retired before a publish could be retried
            (self.control / manifest_name(n)).unlink(missing_ok=True)
            self._unshown.discard(n)
        if done.published or done.retired:
            log.info("published %s (%s from the tree built ahead), retired %s; latest -> %s", done.published,
                     done.ahead, done.retired, self._latest)
        if full is not None:
            raise full
        self._live_seen = frozenset(snap.live)
        self._grace.retry(self._live_seen, tried=done.published)
        done.pending = self._ahead.advance(self._live_seen)
        return done

    def _latest_of(self, live: Collection[int], newest: int | None, blocked: list[int]) -> int | None:
        """What ``latest`` points at: the newest live epoch, or, while that one is not shown (a full
        volume; retired before its turn came, as in a burst of cuts behind a slow publisher), the
        newest live epoch that is: a reader that finds epoch folders always finds ``latest`` with
        them. None while a user's folder holds the newest epoch's name (``latest`` never stands
        for an epoch that folder hides)."""
        if newest is not None and self._owned.holds(newest):
            return newest
        if newest in blocked:
            return None
        return max((n for n in live if self._owned.holds(n)), default=None)

    def _publish_new(self, todo: list[int], done: Step) -> None:
        """Show the live epochs ``todo`` (not visible yet), lost samples' record first: an epoch
        shown here has its placeholders in place when it appears (lost.json is written before
        status.json counts the loss)."""
        self._lost.update(self.store, lambda name, data: self._replace_control(name, data, fsync=False),
                          lambda name: (self.control / name).unlink(missing_ok=True))
        for n in todo:  # the tree built ahead stands for any of them; the next tree follows
            if self._publish_ahead(n):
                done.published.append(n)
                done.ahead.append(n)
            elif self._publish(n):
                done.published.append(n)
                self._ahead.rebase(n)
            else:
                continue
            self._owned.shown(n)

    # ------------------------------------------------------------------ ahead
    def _newest_shown(self) -> list[int]:
        """The epochs this publisher showed, oldest first (the tree built ahead links from the last)."""
        return self._owned.newest()

    def _publish_ahead(self, n: int) -> bool:
        """Show epoch ``n`` from the tree built ahead (:mod:`.folderview_aheadrun`); False when it
        cannot stand for it."""
        started = time.monotonic()

        def control_of(ahead: AheadTree | WindowTree) -> WriteControl:
            def write_control(m: int, manifest: Sequence[bytes]) -> None:
                """What must be in place before the tree is shown as ``epoch-M``."""
                self._publish_classes(folders=(m, ahead.folders()))
                self._unshown.add(m)
                self._replace_control(manifest_name(m), manifest, fsync=False)
                if ahead.tree is not None:  # entries linked before their sample was lost
                    self._lost.place_in(ahead.tree)
                if self.grace:
                    self._grace.record(m)  # pinned before a reader can find it
            return write_control

        if not self._ahead.publish(n, header=self.view.known_at_cut(n), write_control=control_of):
            return False
        self._unshown.discard(n)
        fsync_file(self.control / manifest_name(n))  # durability, after the rename: a reader
        fsync_dir(self.control)  # sees it whole already
        log.debug("epoch %d from the tree built ahead in %.3fs", n, time.monotonic() - started)
        return True

    def drain(self) -> None:
        """Wait until the retired trees handed to the background are removed."""
        if self._remover is not None:
            self._remover.drain()

    def close(self) -> None:
        """A clean stop: the tree built ahead and the retired trees are removed (the published
        epochs stay); a kill leaves them to the next start's :meth:`recover`."""
        self._ahead.drop()
        self.drain()

    # ------------------------------------------------------------------ writing
    def _replace_control(self, name: str, data: bytes | Sequence[bytes], *, fsync: bool) -> None:
        """Replace ``.epochfs/<name>`` by temp + rename (:func:`~epochfs.torchclient.publish.replace_file`);
        ``data``: the bytes, or chunks of them (a manifest's pages). On a full volume the old file
        stays, whole."""
        replace_file(self.control / name, data, fsync=fsync, mode=FILE_MODE)

    def _write_latest(self, latest: int | None, *, removing: set[int]) -> OSError | None:
        """Point ``latest`` at epoch ``latest`` (None: remove it). A full volume's error is returned
        (:func:`~epochfs.torchclient.publish.move_symlink`: it stays, or goes if it points at an
        epoch in ``removing``). A file or folder of that name epochfs did not make (a user's) is
        left as it is, with a warning once: what epochfs did not publish it never replaces nor
        removes, and the epochs are published without ``latest``."""
        path = self.folder / LATEST_NAME
        try:
            full = move_symlink(path, None if latest is None else epoch_name(latest),
                                off={epoch_name(n) for n in removing})
        except NotASymlink:
            if not self._latest_taken:
                log.warning("%s is not a symlink epochfs made (a file or folder of yours?): left as it is, "
                            "and the epochs are published without latest; move it out of the folder "
                            "view to get latest back", path)
            self._latest_taken, self._latest = True, None
            return None
        self._latest_taken = False
        self._latest = latest if full is None else parse_epoch_name(link_target(path) or "")
        return full

    def _publish(self, n: int) -> bool:
        """Make ``epoch-N/`` appear whole: manifest first, the tree under a temporary name, one
        rename (:func:`~epochfs.torchclient.publish.publish_tree`). False when the epoch retired
        meanwhile."""
        try:
            tree = self.view.tree(n)
            manifest = self.view.manifest(n)
        except LookupError:
            return False
        started = time.monotonic()
        self._publish_classes()
        self._unshown.add(n)
        self._replace_control(manifest_name(n), manifest, fsync=True)
        if self.grace:
            self._grace.record(n)  # the grace: pinned for in_use_seconds, before a reader finds it
        publish_tree(self.folder / epoch_name(n), tree.dirs, self._lost.links(tree.links), DIR_MODE)
        self._unshown.discard(n)
        log.debug("epoch %d: %d entries in %.2fs", n, len(tree.links), time.monotonic() - started)
        return True

    def _publish_classes(self, *, folders: tuple[int, list[str]] | None = None) -> None:
        """``.epochfs/classes.json`` with the folders of every live epoch (the one being published
        included) recorded, written before the epoch appears: each folder a reader finds in
        ``epoch-N/`` has its index there (:mod:`epochfs.fuse.classes`). ``folders``:
        epoch N's folders as the tree built ahead has them (its tree is not built again;
        :mod:`.folderview_classes`)."""
        self._replace_control(CLASSES_NAME, render_classes(self.view, folders=folders), fsync=True)

    def _retire(self, n: int) -> bool:
        """``epoch-N/`` disappears at once (renamed away), then its manifest, then its files;
        False, with a warning once, for an ``epoch-N/`` the publisher did not write (a user's
        folder in ``--mount``): what epochfs did not publish it never removes."""
        if self._owned.foreign(n):
            return False
        gone = retire_tree(self.folder / epoch_name(n))
        (self.control / manifest_name(n)).unlink(missing_ok=True)
        if gone is None:
            return True
        if self._remover is not None:
            self._remover.put(gone)  # never delays a publish
        else:
            remove_tree(gone)
        return True
