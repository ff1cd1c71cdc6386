"""The folder view's next epoch, built ahead (issue 25): the cut is a manifest, a rename and fsyncs.

Writing a whole epoch tree when the epoch is asked for made the trainer wait at every boundary
(400,000 entries: 11.4 s, CPU-bound). In snapshot mode the next cut is predictable: the samples
with ids from the front (the newest that fit the epoch budget) up to the newest admitted, and each
cut's set grows from the last one (new samples added at the top, the front moving up as the budget
fills or the oldest are evicted). :class:`AheadTree` keeps that set, and a tree of it under a
temporary name (``.epochfs-ahead-…``, which readers and ``layout.list_epochs`` skip), up to date
while samples land: each step of the publisher pulls the samples admitted since the last (one
indexed query on the admission order) and the new front, links what is new and unlinks what left,
a bounded amount of work at a time so that a cut never waits long behind it.

**At the cut** (:meth:`AheadTree.publish`) the epoch's row says its range ``[first, max]``, its
sample count and bytes; the samples admitted since the last step are added, those above ``max``
(landed after the cut) left out, those below ``first`` removed, and the set is checked against the
row (count and bytes: the set holds every sample of the range, ids never being reused, so equal
counts mean equal sets; plus a spot check of paths and sample ids). Then the manifest is written
from lines kept sorted in memory (header + one join), renamed into ``.epochfs/``, the tree's
folders made ``0555`` and the tree renamed to ``epoch-N``; the fsyncs of the manifest and the
folder follow. Anything the fast path cannot vouch for (schedule mode, an epoch listed row by row,
a path clash, a set that does not match the row) returns False and the caller writes the epoch
the old way, whole (:meth:`FolderPublisher._publish`).

**The next tree** starts as soon as one is published: the entries of the epoch just published are
*hard links* to its symlinks (``link``: no new inode, no new target block, ~1.5x cheaper than
``symlink`` here), new samples get symlinks. So an entry costs one inode however many epochs show
it, and disk per epoch is its folders only.

**Crash safety** is the old argument unchanged: the tree is complete under a temporary name before
the one rename that shows it, and the manifest is in place before that rename; ``kill -9`` at any
moment leaves either the old epochs or the new one, plus temporary names that
:meth:`FolderPublisher.recover` removes (the ahead tree among them: it is built again from the
store after a restart).
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import logging
import os
import queue
import secrets
import shutil
import threading
import time
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from epochfs.sidecar.store import Store, object_name
from epochfs.sidecar.store.objects import fsync_dir
from epochfs.torchclient.layout import MANIFEST_MAGIC, epoch_name

log = logging.getLogger("epochfs.folderview")

AHEAD_TAG = "ahead-"
"""After the folder view's temporary prefix: the next epoch's tree, built ahead."""
CHUNK = 20_000
"""Rows read from the index at a time."""
STEP_SECONDS = 0.1
"""Most seconds one step spends linking ahead, so that a cut waits at most about this behind it."""
SPOT_CHECKS = 16


def remove_tree(path: Path) -> None:
    """Remove a published tree (its folders are 0555, as the FUSE view shows them: opened up
    first, which only root could skip); nothing if it is gone."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
        return
    with contextlib.suppress(FileNotFoundError):
        for dirpath, _dirs, _files in os.walk(path):
            os.chmod(dirpath, 0o755)
        shutil.rmtree(path)


class Remover:
    """Removes renamed-away trees on a thread of its own, so retiring never delays a publish.
    What a kill interrupts is a temporary name that the next start's recovery removes."""

    def __init__(self) -> None:
        self._todo: queue.Queue[Path] = queue.Queue()
        self._thread: threading.Thread | None = None

    def put(self, path: Path) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="folderview-remover", daemon=True)
            self._thread.start()
        self._todo.put(path)

    def drain(self) -> None:
        """Wait until every tree handed over is gone."""
        if self._thread is not None:
            self._todo.join()

    def _run(self) -> None:
        while True:
            path = self._todo.get()
            try:
                remove_tree(path)
            except OSError as e:  # left for the next start's recovery
                log.warning("could not remove %s: %s", path, e)
            finally:
                self._todo.task_done()


@dataclass(frozen=True)
class Extent:
    """A snapshot-mode epoch as its row records it."""

    first: int
    last: int
    samples: int
    bytes: int


class Rows:
    """The reads of the index the ahead tree needs and :class:`Store` has no method for (the
    samples after an id, in admission order; an epoch's range): plain reads through the store's
    own index handle, which follows a reset index."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def _query(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        return self.store._ix.query(sql, args)

    def after(self, after: int, limit: int) -> list[tuple[int, str, int, str, str]]:
        rows = self._query("SELECT id, path, size, checksum, sid FROM samples WHERE id > ? "
                           "ORDER BY id LIMIT ?", (after, limit))
        return [(int(i), str(p), int(s), str(c), str(sid)) for i, p, s, c, sid in rows]  # type: ignore[call-overload]

    def bounds(self) -> tuple[int, int]:
        # Two subqueries: SQLite answers a lone MIN or MAX from the index's ends, both in one
        # SELECT by a scan of the table (every step, 0.1 s apart).
        lo, hi = self._query("SELECT COALESCE((SELECT MIN(id) FROM samples), 0), "
                             "COALESCE((SELECT MAX(id) FROM samples), 0)")[0]
        return int(lo), int(hi)  # type: ignore[call-overload]

    def ids_between(self, lo: int, hi: int) -> set[int]:
        rows = self._query("SELECT id FROM samples WHERE id BETWEEN ? AND ?", (lo, hi))
        return {int(i) for (i,) in rows}  # type: ignore[call-overload]

    def spot(self, ids: list[int]) -> dict[int, tuple[str, str]]:
        marks = ",".join("?" * len(ids))
        rows = self._query(f"SELECT id, path, sid FROM samples WHERE id IN ({marks})", tuple(ids))
        return {int(i): (str(p), str(s)) for i, p, s in rows}  # type: ignore[call-overload]

    def extent(self, n: int) -> Extent | None:
        """Epoch ``n``'s range, count and bytes; None unless it is a live range of the admission order."""
        rows = self._query("SELECT first_sample, max_sample, samples, bytes, retired FROM epochs WHERE n=?",
                           (n,))
        if not rows or rows[0][0] is None or int(rows[0][4]):  # type: ignore[call-overload]
            return None
        first, last, samples, nbytes, _ = rows[0]
        return Extent(int(first), int(last), int(samples), int(nbytes))  # type: ignore[call-overload]


def unsafe(path: str) -> bool:
    """The path rule of the tree builder (``fuse.tree``): such a sample is not shown."""
    return not path or "\0" in path or any(p in ("", ".", "..") for p in path.split("/"))


class Tainted(Exception):
    """The ahead tree cannot stand for the epoch (a clash of paths, a path the manifest cannot
    hold): the epoch is written the old way."""


class AheadTree:
    """The next cut's sample set, its sorted manifest lines and its tree under a temporary name.

    Members are kept in admission order in flat arrays (id, size) with their manifest line and
    object name; ``_start`` is the predicted front of the next cut. About 0.2 KB of memory per
    entry (the line and the object name)."""

    def __init__(self, *, store: Store, folder: Path, link_root: Path, temp_prefix: str) -> None:
        self.rows = Rows(store)
        self.store = store
        self.folder = folder
        self.prefix = str(link_root).rstrip("/") + "/"
        self.temp_prefix = temp_prefix
        self._ids = array("q")
        self._sizes = array("q")  # -1: gone from the store
        self._lines: list[bytes | None] = []  # None: not shown (an unsafe path)
        self._objs: list[str] = []
        self._linked = bytearray()
        self._start = 0  # members below left the next epoch (the front)
        self._holes = 0  # members from _start marked gone (taken out of the store)
        self._pos = 0  # members below are linked (or skipped) in the current tree
        self._hi = 0  # the highest sample id read
        self._body: list[bytes] = []  # sorted manifest lines of the members shown from _start
        self._bytes = 0  # sizes of the members from _start
        self._shown_bytes = 0
        self.tree: Path | None = None
        self._dirs: set[str] = set()
        self._count: dict[str, int] = {}
        self._dirty: set[str] = set()
        self._base: tuple[Path, Extent] | None = None  # the published epoch links are made from
        self._budget = 1
        self._budget_at = -1e18
        self.tainted: str | None = None

    # ------------------------------------------------------------------ the set
    def _budget_now(self) -> int:
        if time.monotonic() - self._budget_at > 5.0:
            self._budget = self.store.policy().epoch_budget
            self._budget_at = time.monotonic()
        return self._budget

    def pending(self) -> bool:
        """Linking is left to do (the publisher steps again at once)."""
        return self.tree is None or self._pos < len(self._ids)

    def _pull(self, upto: int | None = None, *, trim: bool = True) -> None:
        """Read the samples admitted since the last pull (all, or up to id ``upto``) and drop
        members the store no longer holds below its lowest id."""
        lo, hi = self.rows.bounds()
        if hi < self._hi:  # the index was replaced: start over
            raise Tainted("the index was replaced")
        self._drop_front(lambda i: self._ids[i] < lo)
        while upto is None or self._hi < upto:
            rows = self.rows.after(self._hi, CHUNK)
            before = len(self._body)
            for sid_, path, size, checksum, sid in rows:
                self._ids.append(sid_)
                self._sizes.append(size)
                line: bytes | None = None
                if not unsafe(path):
                    line = f"{path}\t{size}\t{checksum}\n".encode()
                    if line.count(b"\t") != 2 or line.count(b"\n") != 1 or b"\r" in line:
                        self.tainted = f"a path or checksum the manifest cannot hold: {path!r}"
                    self._body.append(line)
                    self._shown_bytes += size
                self._lines.append(line)
                self._objs.append(object_name(sid))
                self._linked.append(0)
                self._bytes += size
                self._hi = sid_
            self._sort_tail(len(self._body) - before)
            if len(rows) < CHUNK:
                break
        if trim:  # the front of a cut made now: the newest samples within the epoch budget
            budget = self._budget_now()
            self._drop_front(lambda i: self._bytes > budget)

    def _drop_front(self, due: Callable[[int], bool]) -> None:
        removed: list[bytes] = []
        while self._start < len(self._ids) and due(self._start):
            if self._sizes[self._start] < 0:
                self._holes -= 1
            else:
                removed += self._leave(self._start, hole=False)
            self._start += 1
        self._unbody(removed)
        if self._start > 4096 and self._start * 2 > len(self._ids):
            self._compact()

    def _leave(self, i: int, *, hole: bool = True) -> list[bytes]:
        """Member ``i`` leaves the set: unlinked, its line to remove from the body; ``hole``: it
        stays in the arrays, marked gone (not at the front)."""
        if self._sizes[i] < 0:
            return []
        self._holes += hole
        line = self._lines[i]
        self._bytes -= self._sizes[i]
        if line is not None:
            self._shown_bytes -= self._sizes[i]
        if self._linked[i] and self.tree is not None and line is not None:
            self._unlink(line.split(b"\t", 1)[0].decode())
        self._linked[i] = 0
        self._sizes[i] = -1
        return [] if line is None else [line]

    def _sort_tail(self, added: int) -> None:
        """Put the last ``added`` lines of the body in their places (few: one by one; many: a
        sort, which finds the sorted run and merges the short one in about linear time)."""
        if added <= 0:
            return
        if added > 16:
            self._body.sort()
            return
        tail = self._body[len(self._body) - added:]
        del self._body[len(self._body) - added:]
        for line in tail:
            bisect.insort(self._body, line)

    def _unbody(self, lines: list[bytes]) -> None:
        if not lines:
            return
        if len(lines) < 64:
            for line in lines:
                k = bisect.bisect_left(self._body, line)
                del self._body[k]
        else:
            gone = set(lines)
            self._body = [x for x in self._body if x not in gone]

    def _compact(self) -> None:
        s = self._start
        self._ids, self._sizes = self._ids[s:], self._sizes[s:]
        self._lines, self._objs, self._linked = self._lines[s:], self._objs[s:], self._linked[s:]
        self._pos = max(0, self._pos - s)
        self._start = 0

    # ------------------------------------------------------------------ the tree
    def _new_tree(self) -> None:
        self.tree = self.folder / f"{self.temp_prefix}{AHEAD_TAG}{os.getpid()}-{secrets.token_hex(4)}"
        os.mkdir(self.tree, 0o755)
        self._dirs = {""}
        self._count = {"": 0}  # entries and folders in each folder of the tree
        self._dirty = set()
        self._pos = self._start
        for i in range(self._start, len(self._linked)):
            self._linked[i] = 0

    def folders(self) -> list[str]:
        """The folders of the tree, but its own (what ``classes.json`` records for the epoch)."""
        return sorted(d for d in self._dirs if d)

    def _unlink(self, rel: str) -> None:
        """Remove entry ``rel`` from the tree, and the folders it leaves empty (a whole build
        would not show them)."""
        assert self.tree is not None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tree / rel)
        parent = rel.rpartition("/")[0]
        while True:
            self._dirty.add(parent)
            self._count[parent] -= 1
            if parent == "" or self._count[parent] > 0:
                return
            os.rmdir(self.tree / parent)
            self._dirs.discard(parent)
            del self._count[parent]
            self._dirty.discard(parent)
            parent = parent.rpartition("/")[0]

    def _mkdirs(self, rel: str) -> None:
        parts = rel.split("/")
        for k in range(1, len(parts) + 1):
            sub = "/".join(parts[:k])
            if sub in self._dirs:
                continue
            assert self.tree is not None
            try:
                os.mkdir(self.tree / sub, 0o755)
            except FileExistsError:
                raise Tainted(f"{sub!r} is a file and a folder") from None
            self._dirs.add(sub)
            self._count[sub] = 0
            self._count[sub.rpartition("/")[0]] += 1
            self._dirty.add(sub.rpartition("/")[0])

    def advance(self, seconds: float = STEP_SECONDS) -> None:
        """Bring the set up to the store and link for about ``seconds``; :class:`Tainted` when
        the tree cannot stand for the next epoch."""
        self._pull()
        if self.tree is None:
            self._new_tree()
        self._link(time.monotonic() + seconds)
        self.sync_dirs()

    def _link(self, deadline: float | None, upto: int | None = None) -> None:
        """Link pending members (up to sample id ``upto``), grouped by folder, until ``deadline``."""
        assert self.tree is not None
        end = len(self._ids) if upto is None else bisect.bisect_right(self._ids, upto, lo=self._pos)
        while self._pos < end:
            stop = min(end, self._pos + 4096)
            groups: dict[str, list[int]] = {}
            for i in range(self._pos, stop):
                line = self._lines[i]
                if self._sizes[i] < 0 or line is None:
                    continue
                rel = line.split(b"\t", 1)[0].decode()
                groups.setdefault(rel.rpartition("/")[0], []).append(i)
            for parent, members in groups.items():
                self._link_into(parent, members)
            self._pos = stop
            if deadline is not None and time.monotonic() > deadline:
                return

    def _link_into(self, parent: str, members: list[int]) -> None:
        assert self.tree is not None
        self._mkdirs(parent)
        fd = os.open(self.tree / parent if parent else self.tree, os.O_RDONLY | os.O_DIRECTORY)
        src = -1
        base = self._base
        try:
            if base is not None:
                with contextlib.suppress(OSError):
                    src = os.open(base[0] / parent if parent else base[0], os.O_RDONLY | os.O_DIRECTORY)
            for i in members:
                line = self._lines[i]
                assert line is not None
                name = line.split(b"\t", 1)[0].decode().rpartition("/")[2]
                try:
                    if src >= 0 and base is not None and base[1].first <= self._ids[i] <= base[1].last:
                        try:  # the published entry of this very sample: share its inode
                            os.link(name, name, src_dir_fd=src, dst_dir_fd=fd, follow_symlinks=False)
                        except OSError as e:
                            if e.errno == errno.EEXIST:
                                raise
                            os.symlink(self.prefix + self._objs[i], name, dir_fd=fd)
                    else:
                        os.symlink(self.prefix + self._objs[i], name, dir_fd=fd)
                except FileExistsError:
                    raise Tainted(f"{parent}/{name} clashes with another path") from None
                self._linked[i] = 1
                self._count[parent] += 1
            self._dirty.add(parent)
        finally:
            os.close(fd)
            if src >= 0:
                os.close(src)

    def sync_dirs(self) -> None:
        """fsync the folders changed since the last call."""
        assert self.tree is not None
        for rel in sorted(self._dirty):
            with contextlib.suppress(FileNotFoundError):
                fsync_dir(self.tree / rel if rel else self.tree)
        self._dirty.clear()

    def rebase(self, n: int) -> None:
        """Link from published ``epoch-N`` (one written whole, or found at start: the store's
        epoch, by recovery's check) when it is the newest source: its entries are the symlinks
        of exactly the samples of its range."""
        ext = self.rows.extent(n)
        if ext is not None and (self._base is None or ext.last >= self._base[1].last):
            self._base = (self.folder / epoch_name(n), ext)

    def discard(self, remover: Remover | None = None) -> None:
        """Forget the tree on disk (removed now, or by ``remover``); the set is kept."""
        if self.tree is not None:
            tree, self.tree = self.tree, None
            if remover is None:
                remove_tree(tree)
            else:
                remover.put(tree)

    # ------------------------------------------------------------------ the cut
    def publish(self, n: int, *, control: Path, header: str, write_control: object) -> bool:
        """Show the ahead tree as ``epoch-N`` if it is the store's epoch ``n``; False (nothing
        changed in the folder) when it cannot be, and the caller writes the epoch whole."""
        ext = self.rows.extent(n)
        if ext is None or self.tainted:
            log.debug("epoch %d: not a range of the admission order, or %s: written whole", n, self.tainted)
            return False
        if self.tree is None:
            self._new_tree()
        self._pull(upto=ext.last, trim=False)
        self._drop_front(lambda i: self._ids[i] < ext.first)
        k = bisect.bisect_right(self._ids, ext.last, lo=self._start)
        late = range(k, len(self._ids))  # admitted after the cut: kept for the next epoch
        late_lines = [x for i in late if self._sizes[i] >= 0 and (x := self._lines[i]) is not None]
        late_bytes = sum(self._sizes[i] for i in late if self._sizes[i] >= 0)
        late_shown = sum(self._sizes[i] for i in late
                         if self._sizes[i] >= 0 and self._lines[i] is not None)
        count = k - self._start - self._holes
        if (count, self._bytes - late_bytes) != (ext.samples, ext.bytes):
            self._resync(ext)  # something in the range left the store (taken out): look
            k = bisect.bisect_right(self._ids, ext.last, lo=self._start)
            count = k - self._start - self._holes
            if (count, self._bytes - late_bytes) != (ext.samples, ext.bytes):
                log.info("epoch %d: the tree built ahead holds %d samples, %d bytes; the epoch %d, %d: "
                         "written whole", n, count, self._bytes - late_bytes, ext.samples, ext.bytes)
                return False
        if not self._spot_check(k):
            return False
        for i in late:  # unlinked from this tree: the next one links them again
            if self._linked[i] and (line := self._lines[i]) is not None:
                self._unlink(line.split(b"\t", 1)[0].decode())
                self._linked[i] = 0
        self._link(None, upto=ext.last)
        self._pos = min(self._pos, k)
        self.sync_dirs()
        self._unbody(late_lines)
        try:
            files = len(self._body)
            shown = self._shown_bytes - late_shown
            head = f"{MANIFEST_MAGIC}\tepoch={n}\tfiles={files}\tbytes={shown}{header}\n"
            write_control(n, head.encode() + b"".join(self._body))  # type: ignore[operator]
            assert self.tree is not None
            for rel in self._dirs:
                os.chmod(self.tree / rel if rel else self.tree, 0o555)
            os.rename(self.tree, self.folder / epoch_name(n))
        finally:
            self._body.extend(late_lines)
            self._body.sort()
        published = self.folder / epoch_name(n)
        self._base = (published, ext)
        self.tree = None
        fsync_dir(self.folder)  # durability only: what a reader sees is complete already
        return True

    def _resync(self, ext: Extent) -> None:
        """Members of ``ext``'s range the store no longer holds leave the set."""
        held = self.rows.ids_between(ext.first, ext.last)
        removed: list[bytes] = []
        for i in range(self._start, len(self._ids)):
            if self._ids[i] > ext.last:
                break
            if self._sizes[i] >= 0 and self._ids[i] not in held:
                removed += self._leave(i)
        self._unbody(removed)

    def _spot_check(self, k: int) -> bool:
        """A few members against the store's rows: same path, same sample id (a replaced index)."""
        if k <= self._start:
            return True
        stride = max(1, (k - self._start) // SPOT_CHECKS)
        picks = [i for i in [*list(range(self._start, k, stride))[:SPOT_CHECKS], k - 1]
                 if self._sizes[i] >= 0]
        if not picks:
            return True
        rows = self.rows.spot([self._ids[i] for i in picks])
        for i in picks:
            row = rows.get(self._ids[i])
            line = self._lines[i]
            if row is None or object_name(row[1]) != self._objs[i] or (
                    line is not None and line.split(b"\t", 1)[0].decode() != row[0]):
                log.info("the tree built ahead differs from the store at sample %d: written whole",
                         self._ids[i])
                return False
        return True
