"""The immutable folder tree of one epoch: names, symlink targets and attributes, without FUSE.

Split from :mod:`epochfs.fuse.view` (which keeps the changing namespace around it) so that each
module holds one concern: this one turns an epoch's file list into folders and symlinks. The one
pass that builds the arrays, with the path rules (unsafe or clashing paths are skipped) the FUSE
view and the folder view share, is :mod:`.treebuild`; this module searches and answers from them.

**Compact on purpose** (a tree of dicts and objects held ~0.85 KB per file, ~770 MB for a 1M-file
epoch). Nothing is kept per file as a Python object: the tree is a handful of flat arrays, built in
one pass over the store's stream and answered by binary search:

* every node (folder or file) has its leaf name in one ``bytes`` blob (``_name_off`` bounds each);
  nodes are laid out one folder's children after another, each run sorted by name, so a folder's
  listing is an index range (readdir offsets are indexes into it) and a lookup is a bisection per
  path component;
* ``_ref[node]`` is a file's ordinal (its object name's place in ``_objs``), or ``-(rank + 1)``
  for a folder, whose children are ``_dir_first[rank]`` .. ``+ _dir_count[rank]``;
* ``_shown`` has one byte per file of the stream (shown or skipped), so the manifest is the store's
  stream read again, filtered, without keeping sizes or checksums here.

An :class:`Attr` or a name string exists only while the kernel asks for it. About 60-70 bytes per
file (a 20-byte leaf name, a 35-byte object name, two 4-byte indexes); docs/performance.md, "FUSE
server memory".
"""

from __future__ import annotations

import bisect
import stat
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from epochfs.fuse.packed import PackedBytes, PackedWriter
from epochfs.fuse.treebuild import ENC, ROOT, TreeBuilder, smallest
from epochfs.fuse.treeviews import Dirs, Links, Listing
from epochfs.sidecar.store import FileEntry
from epochfs.torchclient.layout import MANIFEST_MAGIC, format_manifest

DIR_MODE = stat.S_IFDIR | 0o555
LINK_MODE = stat.S_IFLNK | 0o777
FILE_MODE = stat.S_IFREG | 0o444

_MANIFEST_BATCH = 4096
"""Manifest rows formatted at a time (their text is compressed away before the next batch)."""


class NotFound(LookupError):
    """The path names nothing in the view (the FUSE layer answers ENOENT)."""


class NotADirectory(LookupError):
    """A directory operation on something that is not one (ENOTDIR)."""


class NotALink(LookupError):
    """readlink of something that is not a symlink (EINVAL)."""


@dataclass(frozen=True)
class Attr:
    """What ``stat`` shows for one node; stable for immutable nodes so the kernel keeps its caches."""

    mode: int
    size: int
    mtime: float
    nlink: int = 1

    def to_stat(self, *, uid: int, gid: int) -> dict[str, int]:
        """The ``stat`` fields as mfusepy takes them with ``use_ns`` (times in nanoseconds)."""
        ns = int(self.mtime * 1e9)
        return {
            "st_mode": self.mode,
            "st_size": self.size,
            "st_nlink": self.nlink,
            "st_uid": uid,
            "st_gid": gid,
            "st_mtime": ns,
            "st_ctime": ns,
            "st_atime": ns,
            "st_blocks": (self.size + 511) // 512,
        }

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)


class EpochTree:
    """The immutable folder tree of one epoch, built once from the store's files of the epoch.

    ``files`` must come in path order (the store's order: a sample's path is its key, listed by
    key); ``reread`` gives the same files again for :meth:`manifest` (by default ``files`` itself
    when it is a sequence)."""

    def __init__(self, *, epoch: int, cut_at: float, files: Iterable[FileEntry], link_root: Path,
                 reread: Callable[[], Iterable[FileEntry]] | None = None) -> None:
        self.epoch = epoch
        self.cut_at = cut_at
        if reread is None and isinstance(files, Sequence):
            listed = files
            reread = lambda: listed  # noqa: E731
        self._reread = reread
        b = TreeBuilder(epoch)
        prev: str | None = None
        for f in files:
            ok = b.add(f, prev)
            b.shown.append(ok)
            if ok:
                prev = f.path
        self._root_rank = b.finish()
        self._names = bytes(b.names)
        self._name_off = smallest(b.name_off)
        self._ref = smallest(b.ref)
        self._objs = bytes(b.objs)
        self._obj_off = smallest(b.obj_off)
        self._dir_first = smallest(b.dir_first)
        self._dir_count = smallest(b.dir_count)
        self._dir_node = smallest(b.dir_node)
        self._shown = bytes(b.shown)
        self.files_shown = len(self._obj_off) - 1
        self._dir_attr = Attr(DIR_MODE, 0, cut_at, 2)
        self._prefix_len = len(str(link_root).rstrip("/").encode(*ENC)) + 1
        self._prefix = str(link_root).rstrip("/") + "/"
        self._link_attrs: dict[int, Attr] = {}  # by target length: a few per epoch
        self.lost: Mapping[bytes, int] = {}
        """Object names of samples the remote lost -> size, set by the view (:mod:`.lost`): their
        entries show as regular files, whose reads the FUSE view answers EIO. The arrays (and
        with them names, node numbers, links and the manifest) never change."""
        self._shape: tuple[int, int, int, int] | None = None

    # ------------------------------------------------------------------ memory
    def nbytes(self) -> int:
        """Bytes held by the arrays and blobs (what grows with the files; the rest is constant)."""
        arrays = (self._name_off, self._ref, self._obj_off, self._dir_first, self._dir_count, self._dir_node)
        return (len(self._names) + len(self._objs) + len(self._shown)
                + sum(a.itemsize * len(a) for a in arrays))

    # ------------------------------------------------------------------ nodes
    def name_of(self, node: int) -> str:
        """The name of node ``node`` (its path's last part): a :class:`Listing` reads its entries by
        number, ``first + i``."""
        return self._names[self._name_off[node]:self._name_off[node + 1]].decode(*ENC)

    def _rank(self, node: int) -> int | None:
        """The folder rank of ``node``, None for a file."""
        if node == ROOT:
            return self._root_rank
        r = self._ref[node]
        return -r - 1 if r < 0 else None

    def _child(self, rank: int, name: bytes) -> int:
        lo = self._dir_first[rank]
        hi = lo + self._dir_count[rank]
        names, off = self._names, self._name_off
        while lo < hi:
            mid = (lo + hi) // 2
            here = names[off[mid]:off[mid + 1]]
            if here < name:
                lo = mid + 1
            elif here > name:
                hi = mid
            else:
                return mid
        raise NotFound(name.decode(*ENC))

    def _find(self, rel: str) -> int:
        if not rel:
            return ROOT
        node = ROOT
        for part in rel.split("/"):
            rank = self._rank(node)
            if rank is None:
                raise NotFound(rel)
            try:
                node = self._child(rank, part.encode(*ENC))
            except NotFound:
                raise NotFound(rel) from None
        return node

    def _target(self, node: int) -> str:
        i = self._ref[node]
        return self._prefix + self._objs[self._obj_off[i]:self._obj_off[i + 1]].decode(*ENC)

    def attr_of(self, node: int) -> Attr:
        """The attributes of node ``node`` (a listing's entry, as :meth:`lookup` answers its path)."""
        r = self._ref[node] if node != ROOT else -1
        if r < 0:
            return self._dir_attr
        if self.lost:
            lost = self.lost.get(self._objs[self._obj_off[r]:self._obj_off[r + 1]])
            if lost is not None:
                return Attr(FILE_MODE, lost, self.cut_at)
        size = self._prefix_len + self._obj_off[r + 1] - self._obj_off[r]
        attr = self._link_attrs.get(size)
        if attr is None:
            attr = self._link_attrs.setdefault(size, Attr(LINK_MODE, size, self.cut_at))
        return attr

    # ------------------------------------------------------------------ nodes by number
    # The low-level FUSE adapter (:mod:`epochfs.fuse.inodes`) names nodes by these numbers instead of
    # keeping a table of paths: a node's number is stable for the epoch's life, since a rebuilt tree
    # (the same immutable files) lays out the same arrays.
    def node_of(self, rel: str) -> int:
        """The node number of ``rel`` (-1 for the epoch's own folder); NotFound if absent."""
        return self._find(rel)

    def path_of(self, node: int) -> str:
        """The relative path of node ``node`` (:meth:`node_of`'s inverse); NotFound if out of range.
        A node's folder is the run of children that holds it: runs are laid out in rank order, so a
        bisection of the runs' starts finds it (a few bytes per folder, nothing per file)."""
        if node == ROOT:
            return ""
        if not 0 <= node < len(self._ref):
            raise NotFound(f"node {node}")
        parts = []
        while node != ROOT:
            parts.append(self.name_of(node))
            rank = bisect.bisect_right(self._dir_first, node) - 1
            node = self._dir_node[rank]
        return "/".join(reversed(parts))

    @property
    def folder_count(self) -> int:
        """How many folders the tree holds, the epoch's own included (:class:`Dirs`' length)."""
        return len(self._dir_first)

    def folder_paths(self) -> list[str]:
        """The relative paths of every folder but the epoch's own, from the folders' arrays alone
        (no file is visited): what ``.epochfs/classes.json`` records (:mod:`.classes`)."""
        return [self.path_of(node) for node in self._dir_node if node != ROOT]

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(nodes, files shown, CRC-32 of the names, of the link targets): what differs if the
        epoch's file list did (:mod:`.inodes`). Computed once per tree (~1% of its build)."""
        if self._shape is None:
            self._shape = (len(self._ref), self.files_shown, zlib.crc32(self._names), zlib.crc32(self._objs))
        return self._shape

    def first_child(self, rel: str) -> int:
        """The node number of the first entry of folder ``rel`` (its listing's entry ``i`` is node
        ``first + i``); NotADirectory for a file."""
        rank = self._rank(self._find(rel))
        if rank is None:
            raise NotADirectory(rel)
        return self._dir_first[rank]

    # ------------------------------------------------------------------ answers
    def lookup(self, rel: str) -> Attr:
        return self.attr_of(self._find(rel))

    def listdir(self, rel: str) -> Listing:
        node = self._find(rel)
        rank = self._rank(node)
        if rank is None:
            raise NotADirectory(rel)
        return Listing(self, self._dir_first[rank], self._dir_count[rank])

    def is_lost(self, rel: str) -> bool:
        """Whether ``rel`` is the entry of a sample the remote lost (:attr:`lost`)."""
        if not self.lost:
            return False
        node = self._find(rel)
        r = self._ref[node] if node != ROOT else -1
        return r >= 0 and self._objs[self._obj_off[r]:self._obj_off[r + 1]] in self.lost

    def readlink(self, rel: str) -> str:
        node = self._find(rel)
        if self._rank(node) is not None:
            raise NotALink(rel)
        return self._target(node)

    def walk(self) -> Iterator[tuple[str, bool]]:
        """(relative path, is a folder) of every node, the root ``""`` first, folders before
        their contents, each folder's children in name order."""
        yield "", True
        todo = [("", self._root_rank)]
        while todo:
            base, rank = todo.pop()
            first = self._dir_first[rank]
            sub = []
            for node in range(first, first + self._dir_count[rank]):
                rel = base + self.name_of(node)
                child = self._rank(node)
                yield rel, child is not None
                if child is not None:
                    sub.append((rel + "/", child))
            todo.extend(reversed(sub))

    @property
    def links(self) -> Links:
        """Relative path -> symlink target of every file shown (a view, nothing copied)."""
        return Links(self)

    @property
    def dirs(self) -> Dirs:
        """The relative paths of every folder, ``""`` the epoch's own (a view, nothing copied)."""
        return Dirs(self)

    def manifest(self, header: str = "") -> bytes:
        """The manifest as plain bytes (:meth:`packed_manifest`, inflated whole)."""
        return bytes(self.packed_manifest(header))

    def packed_manifest(self, header: str = "") -> PackedBytes:
        """The manifest of the files shown (skipped paths left out), in the layout's format, kept
        compressed: the epoch's files read again (``reread``), filtered by what the build showed,
        and formatted a batch at a time, so neither the rows nor the text are ever held whole.
        ``header``: more fields of the header line (``\tname=value``...)."""
        if self._reread is None:
            raise ValueError("this tree was built from a one-shot iterable: no manifest")
        out = PackedWriter()
        batch: list[tuple[str, int, str]] = []
        files = total = count = 0
        shown = self._shown

        def flush() -> None:
            text = format_manifest(self.epoch, batch)  # checks the fields; rows come in path order
            out.write(text[text.index("\n") + 1:].encode())
            batch.clear()

        for i, f in enumerate(self._reread()):
            if i >= len(shown):
                raise NotFound(f"epoch {self.epoch} changed since its tree was built")
            if shown[i]:
                batch.append((f.path, f.size, f.checksum))
                files += 1
                total += f.size
                if len(batch) >= _MANIFEST_BATCH:
                    flush()
            count = i + 1
        if count != len(shown):
            raise NotFound(f"epoch {self.epoch} changed since its tree was built")
        flush()
        return out.finish(f"{MANIFEST_MAGIC}\tepoch={self.epoch}\tfiles={files}\tbytes={total}{header}\n"
                          .encode())
