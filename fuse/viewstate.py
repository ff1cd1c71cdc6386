"""What the namespace of a mount is computed from: the store's live epochs and status as of the last
refresh, the epoch trees and manifests kept built, and the reads and open folders that pin epochs.

Apart from :mod:`.view` (which answers paths: getattr, listdir, readlink, open) so that the state
the answers read, and when it changes, is one module: :class:`ViewState` is the base of
:class:`~epochfs.fuse.view.View`. No FUSE here either.
"""

from __future__ import annotations

import logging
import os
import socket
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from epochfs.fuse.classes import ClassesFile
from epochfs.fuse.epochreads import EpochReads
from epochfs.fuse.heap import release_free_memory
from epochfs.fuse.lookupcut import request_cut
from epochfs.fuse.lost import LostEntries
from epochfs.fuse.packed import PackedBytes
from epochfs.fuse.tree import DIR_MODE, Attr, EpochTree, NotFound
from epochfs.sidecar.store import EpochReader, Meta, Stats
from epochfs.sidecar.store.diskmargin import show_volume_full
from epochfs.sidecar.store.index import is_corruption
from epochfs.sidecar.store.stats import retry_line
from epochfs.torchclient.layout import (
    REPORT_URL_KEY,
    SHARD_KEY,
    epoch_name,
    format_status,
    manifest_name,
    parse_epoch_name,
)

log = logging.getLogger("epochfs.fuse")
T = TypeVar("T")
STATUS_BLOCK = 4096
"""``status.json`` is served padded with spaces to a multiple of this: two readers' opens
(each its own document, rendered then) have the same size unless the document crossed a block
between them, and Linux's ``fstat`` asks the server for the file, not for an open, so the
answer is another open's size (the newest); with both the same, a reader that fstats and reads
that many bytes (``tar``, hence ``kubectl cp``, beside a poller in any container) gets its whole
document. JSON ignores the trailing spaces."""
HELD_MARGIN = 5.0
"""Seconds a held epoch's read is dated beyond the debounce: its next renewal comes within one
debounce and a refresh (:data:`~epochfs.torchclient.layout.VIEW_REFRESH_SECONDS`), or a few
refreshes when the index is busy; dated past that, an epoch with a folder open stays pinned
whatever the in-use window, 0 included."""
TREES_KEPT = 3
"""Epoch trees (and manifests) the view keeps built, the least recently used dropped first: a
trainer reads one epoch while the next is warmed, and one more reader (an evaluation of a pinned
epoch) reads beside them; any other epoch looked at is built again from the store when asked, so
the server's memory does not grow with the number of epochs viewed. A request by inode needs its
epoch's tree, so readers of more epochs than this at once rebuild trees in turn (a pass over the
store each)."""


def _keep_newest_used(cache: dict[int, T], n: int, keep: int) -> None:
    """Move ``n`` to the end of ``cache`` (insertion order: least recently used first) and drop
    the oldest entries beyond ``keep``."""
    cache[n] = cache.pop(n)
    while len(cache) > keep:
        del cache[next(iter(cache))]


def split_path(path: str) -> list[str]:
    """``/a/b/`` -> ``["a", "b"]``; the FUSE layer passes absolute paths."""
    return [p for p in path.split("/") if p]



def padded_status(doc: dict[str, object]) -> bytes:
    """``status.json``'s bytes as served: :func:`format_status`, its last newline after spaces
    up to a multiple of :data:`STATUS_BLOCK`."""
    text = format_status(doc).encode()
    return text[:-1] + b" " * (-len(text) % STATUS_BLOCK) + b"\n"

@dataclass(frozen=True)
class Snapshot:
    """The changing part of the view, re-read from the store by :meth:`ViewState.refresh`."""

    live: dict[int, float]
    """Live epoch -> cut time."""
    latest: int | None
    status: bytes
    status_key: bytes
    """``status`` without its clock field: tells whether anything but the time changed."""


@dataclass(frozen=True)
class BuiltBytes:
    """What the trees and manifests a view keeps built hold (:meth:`ViewState.built_bytes`)."""

    trees: int
    manifests: int
    """The manifests' sizes as served."""
    manifests_kept: int
    """What the manifests take in memory, kept compressed."""


class ViewState:
    """The state of the namespace over one store (:class:`~epochfs.fuse.view.View` answers paths
    from it). Thread-safe: FUSE calls it from many threads."""

    def __init__(self, *, store: EpochReader, link_root: Path, uid: int = 0, gid: int = 0,
                 started: float | None = None, read_debounce: float = 10.0) -> None:
        if not link_root.is_absolute():
            raise ValueError(f"link root must be an absolute path, got {link_root}")
        if read_debounce < 0:
            raise ValueError("read_debounce must not be negative")
        self.store = store
        self.link_root = link_root
        self.uid = uid
        self.gid = gid
        self.started = time.time() if started is None else started
        self.read_debounce = read_debounce
        self.node = f"{socket.gethostname()}:{os.path.abspath(store.root)}"
        """Which sidecar this is, as ``status.json``'s shard names it: two nodes' sidecars never share
        a host name and a cache, and every reader of one sidecar sees the same name whatever path
        it mounts the view at."""
        self._lock = threading.Lock()
        self._refresh_lock = threading.Lock()
        self._trees: dict[int, EpochTree] = {}
        self._manifests: dict[int, PackedBytes] = {}
        self._manifest_sizes: dict[int, int] = {}
        """Live epoch -> its manifest's size, kept apart from the :data:`TREES_KEPT` built ones
        until the epoch retires (an int each): an epoch never changes once cut, and listing
        ``.epochfs`` sizes every live epoch's manifest, which with more live epochs than trees
        kept rebuilt every tree and manifest at each listing."""
        self.reads = EpochReads()
        self.lost = LostEntries()
        self.lost.refresh(store)  # before any tree is built: a lost entry is never served as a link
        self._snap = self._read_snapshot(None)
        self._dir_attr = Attr(DIR_MODE, 0, self.started, 2)
        self.classes = ClassesFile(store)

    # ------------------------------------------------------------------ changing state
    def _read_snapshot(self, old: Snapshot | None) -> Snapshot:
        """The store's state now; ``old`` (None at the start: nothing to fall back on) stands in
        for what a damaged index cannot answer (:meth:`_snapshot_while_damaged`)."""
        try:
            stats = self.store.stats()
        except sqlite3.DatabaseError as e:
            if old is None or not is_corruption(e):
                raise
            return self._snapshot_while_damaged(old)
        doc = self._status_doc(stats)
        live = {int(e["epoch"]): float(e["cut_at"]) for e in stats.epochs}
        status = padded_status(doc)
        key_doc = dict(doc)
        key_doc.pop("time", None)
        key = format_status(key_doc).encode()
        return Snapshot(live, stats.latest_epoch, status, key)

    def _snapshot_while_damaged(self, old: Snapshot) -> Snapshot:
        """The snapshot while the index is damaged (until the sampler replaces it, seconds): the
        epochs cut since ``old`` added from the members files (the store's ``epochs()`` answers
        from them then), none taken away (nothing retires while the index takes no write, and an
        epoch whose file is not written yet is still live), the status as it was."""
        live = {**old.live, **{e.epoch: e.cut_at for e in self.store.epochs()}}
        latest = max(live) if live else None
        return Snapshot(live, latest, old.status, old.status_key)

    @property
    def snapshot(self) -> Snapshot:
        return self._snap

    def refresh(self) -> tuple[Snapshot, Snapshot]:
        """Re-read live epochs and status from the store; returns (old, new) for invalidation."""
        with self._refresh_lock:  # one at a time, so a slow refresh never installs an older state
            new = self._read_snapshot(self._snap)
            try:
                lost = self.lost.refresh(self.store)
            except sqlite3.DatabaseError as e:  # the damaged index: the lost entries as they were
                if not is_corruption(e):
                    raise
                lost = False
            with self._lock:
                old = self._snap
                self._snap = new
                if lost:
                    for t in self._trees.values():
                        t.lost = self.lost.sizes
                for n in [n for n in self._trees if n not in new.live]:
                    del self._trees[n]
                for n in [n for n in self._manifests if n not in new.live]:
                    del self._manifests[n]
                for n in [n for n in self._manifest_sizes if n not in new.live]:
                    del self._manifest_sizes[n]
            self.reads.forget_retired(new.live)
        return old, new

    def render_status(self) -> bytes:
        """A fresh status document (each open of status.json gets its own)."""
        return padded_status(self._status_doc(self.store.stats()))

    def _status_doc(self, stats: Stats) -> dict[str, object]:
        """``status.json``'s document: the store's stats, ``sampler_retrying`` while the
        supervisor records that the sampler cannot reach the remote (a trainer reads only the
        mount, so its waiting line says why no data comes; absent otherwise), and the report URL
        the supervisor recorded (:data:`REPORT_URL_KEY`: the client finds a sidecar on any
        ``--health-port`` through the mount it reads), and its shard (:meth:`_shard`)."""
        doc = stats.to_json()
        show_volume_full(doc, self.store.root)  # a pause the index could not record
        retrying = retry_line(self.store.meta(Meta.SAMPLER_RETRYING), time.time())
        if retrying:
            doc["sampler_retrying"] = retrying
        report_url = self.store.meta(Meta.REPORT_URL)
        if report_url:
            doc[REPORT_URL_KEY] = report_url
        shard = self._shard()
        if shard is not None:
            doc[SHARD_KEY] = shard
        return doc

    def _shard(self) -> dict[str, object] | None:
        """The shard this sidecar samples (:data:`SHARD_KEY`), as its cache records it (``i/c``,
        :data:`Meta.SAMPLER_SHARD`); None until the sampler recorded it. Only the trainers see every
        node, so the view publishes it for them to compare: one node's sidecar cannot tell that
        another node has the same ``--shard-index`` or another ``--shard-count``."""
        index, _, count = (self.store.meta(Meta.SAMPLER_SHARD) or "").partition("/")
        if not (index.isdigit() and count.isdigit()):
            return None
        return {"index": int(index), "count": int(count), "node": self.node}

    def render_classes(self) -> bytes:
        """``classes.json``, with the folders of every live epoch recorded first."""
        live = [e.epoch for e in self.store.epochs()]
        if any(n not in self._snap.live for n in live):
            self.refresh()  # cut since the last refresh: its tree is needed now
        return self.classes.render(live, self.tree)

    # ------------------------------------------------------------------ reads and holds
    # The bookkeeping is :class:`~.epochreads.EpochReads`; the view decides what counts as a read.
    def note_read(self, n: int) -> None:
        """Remember that epoch ``n`` was used; :meth:`flush_reads` records it (debounced)."""
        self.reads.note(n, debounce=self.read_debounce)

    def open_dir(self, path: str) -> int | None:
        """A folder is opened (opendir): inside a live epoch, the epoch is held until
        :meth:`close_dir`. Returns the epoch held, None outside epochs; NotFound / NotADirectory
        when ``path`` is no folder of a live epoch."""
        parts = split_path(path)
        n = parse_epoch_name(parts[0]) if parts else None
        if n is None:
            return None
        if n not in self._snap.live:
            raise NotFound(path)
        self.tree(n).listdir("/".join(parts[1:]))  # a folder of the epoch, or NotFound/NotADirectory
        self.reads.hold(n)
        self.note_read(n)
        return n

    def close_dir(self, n: int) -> None:
        """The folder handle :meth:`open_dir` counted is released."""
        self.reads.release(n)

    def held(self) -> list[int]:
        """Epochs with an open folder handle (a reader inside them), ascending."""
        return self.reads.held()

    def renew_held(self) -> None:
        """Note a read of every held epoch (debounced like any read), so a reader that keeps an
        epoch open keeps it pinned however long it pauses."""
        for n in self.held():
            self.note_read(n)

    def flush_reads(self) -> list[int]:
        """Write the noted reads to the store (off the FUSE request path: it takes a write lock);
        a held epoch's dated ahead by the debounce and :data:`HELD_MARGIN`, past its next renewal."""
        return self.reads.flush(self.store, held_ahead=self.read_debounce + HELD_MARGIN)

    # ------------------------------------------------------------------ epochs
    def _epoch_live(self, n: int, *, cut: bool) -> float | None:
        """Cut time of live epoch ``n``; with ``cut``, a lookup above the newest asks for a cut."""
        cut_at = self._snap.live.get(n)
        if cut_at is not None:
            return cut_at
        newest = self.store.newest_epoch()
        if newest is not None and n <= newest:
            # Cut after our last refresh, or retired / never cut: ask the store, not the snapshot.
            live = {e.epoch: e.cut_at for e in self.store.epochs()}
            if n in live:
                self.refresh()
            return live.get(n)
        if not cut:
            return None
        if not request_cut(self.store, n):
            return None
        self.refresh()
        return self._snap.live.get(n)

    def tree(self, n: int) -> EpochTree:
        """The tree of live epoch ``n`` (built once, cached until it retires)."""
        t = self._trees.get(n)
        if t is not None:
            self._used(self._trees, n)
            return t
        cut_at = self._snap.live.get(n)
        if cut_at is None:
            raise NotFound(epoch_name(n))
        store = self.store
        try:  # streamed: no list of the epoch's files is ever held (per-file memory)
            t = EpochTree(epoch=n, cut_at=cut_at, files=store.iter_epoch_files(n), link_root=self.link_root,
                          reread=lambda: store.iter_epoch_files(n))
        except KeyError:
            raise NotFound(epoch_name(n)) from None
        log.debug("epoch %d: tree built", n)  # counted by tests: sizing a manifest builds none
        with self._lock:  # the lost map read under the lock the refresh installs it under: never an old one
            t.lost = self.lost.sizes
            if n in self._snap.live:
                t = self._trees.setdefault(n, t)
                _keep_newest_used(self._trees, n, TREES_KEPT)
        release_free_memory()  # the build's high-water mark (the store's chunks of rows), not kept
        return t

    def built_bytes(self) -> BuiltBytes:
        """Bytes the kept trees and manifests hold now: what grows with the files of the epochs
        read (``epochfs bench fuse-memory`` reports them beside the server's RSS)."""
        with self._lock:
            trees, manifests = list(self._trees.values()), list(self._manifests.values())
        return BuiltBytes(trees=sum(t.nbytes() for t in trees), manifests=sum(len(m) for m in manifests),
                          manifests_kept=sum(m.nbytes() for m in manifests))

    def drop_built(self) -> None:
        """Forget the kept trees and manifests: each is built again from the store when next asked,
        as one dropped beyond :data:`TREES_KEPT` is (the memory benchmark times a fresh build)."""
        with self._lock:
            self._trees.clear()
            self._manifests.clear()

    def _used(self, cache: dict[int, T], n: int) -> None:
        """``n`` of ``cache`` was used: the last to be dropped (the least recently used goes first,
        else three readers of three epochs would each drop the tree the next one needs)."""
        with self._lock:
            if n in cache and next(reversed(cache)) != n:
                cache[n] = cache.pop(n)

    def manifest(self, n: int) -> bytes:
        """Epoch ``n``'s manifest as plain bytes (the folder view writes it to a file)."""
        return bytes(self.packed_manifest(n))

    def known_at_cut(self, n: int) -> str:
        """The manifest header's record of how much of the dataset the listing had seen when
        epoch ``n`` was cut (``listed=`` keys of this shard, about ``estimated=`` in the remote);
        the folder view's publisher writes the same header."""
        info = next((e for e in self.store.epochs() if e.epoch == n), None)
        if info is None or info.listed is None or info.estimated is None:
            return ""
        return f"\tlisted={info.listed}\testimated={info.estimated}"

    def packed_manifest(self, n: int) -> PackedBytes:
        """Epoch ``n``'s manifest, kept compressed (:mod:`epochfs.fuse.packed`): FUSE reads slice it."""
        m = self._manifests.get(n)
        if m is not None:
            self._used(self._manifests, n)
        else:
            try:
                m = self.tree(n).packed_manifest(self.known_at_cut(n))
            except KeyError:  # retired while it was read again
                raise NotFound(manifest_name(n)) from None
            with self._lock:
                if n in self._snap.live:
                    self._manifests[n] = m
                    self._manifest_sizes[n] = len(m)
                    _keep_newest_used(self._manifests, n, TREES_KEPT)
            release_free_memory()
        return m

    def manifest_size(self, n: int) -> int:
        """The size of live epoch ``n``'s manifest: built once (:meth:`packed_manifest`), then
        known until the epoch retires, whether or not its manifest is still kept built."""
        size = self._manifest_sizes.get(n)
        return len(self.packed_manifest(n)) if size is None else size
