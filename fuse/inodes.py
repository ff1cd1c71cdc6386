"""Inode numbers for the low-level FUSE adapter, computed from the view instead of kept in a table.

libfuse's high-level API names files by path and keeps a node (about 137 bytes with its name) for
every entry the kernel holds, so a mount whose trainer has looked at 1M files holds 1M of them
(docs/performance.md, "FUSE server memory"). The low-level API names files by inode number, and
these numbers are a function of the namespace, so nothing is kept per file:

* fixed numbers for the root (1, FUSE's root id), ``.epochfs`` (2), ``latest`` (3) and
  ``.epochfs/status.json`` (4), ``.epochfs/classes.json`` (5);
* ``epoch-N`` is ``(N + 1) << 32`` and the node ``i`` of its tree (:meth:`EpochTree.node_of`) is
  ``(N + 1) << 32 | (i + 1)``: an epoch is immutable, so its tree lays out the same node numbers
  every time it is built, and epoch numbers are never reused;
* ``.epochfs/epoch-N.manifest`` is ``1 << 62 | N``.

A number whose epoch has retired names nothing (ENOENT), which is what the kernel is told when the
epoch retires (:class:`~epochfs.fuse.kernelcache.Refresher`).
"""

from __future__ import annotations

from epochfs.fuse.tree import EpochTree
from epochfs.fuse.view import TREES_KEPT, NotFound, View, split_path
from epochfs.torchclient.layout import (
    CLASSES_NAME,
    CONTROL_DIR,
    LATEST_NAME,
    MAX_EPOCH,
    STATUS_NAME,
    epoch_name,
    manifest_name,
    parse_epoch_name,
    parse_manifest_name,
)

ROOT_INO = 1
CONTROL_INO = 2
LATEST_INO = 3
STATUS_INO = 4
CLASSES_INO = 5
_SHIFT = 32
_NODE_MASK = (1 << _SHIFT) - 1
_MANIFEST = 1 << 62
MAX_NODES = _NODE_MASK - 1
"""Nodes an epoch's tree may have and still be named (files and folders)."""

_FIXED = {ROOT_INO: "/", CONTROL_INO: f"/{CONTROL_DIR}", LATEST_INO: f"/{LATEST_NAME}",
          STATUS_INO: f"/{CONTROL_DIR}/{STATUS_NAME}", CLASSES_INO: f"/{CONTROL_DIR}/{CLASSES_NAME}"}


def epoch_ino(n: int, node: int = -1) -> int:
    """The inode number of node ``node`` of epoch ``n``'s tree (-1: the ``epoch-N`` folder)."""
    if not 0 <= n <= MAX_EPOCH:
        raise NotFound(f"epoch {n} has no inode numbers (0..{MAX_EPOCH})")
    if not -1 <= node < MAX_NODES:
        raise NotFound(f"epoch {n}: node {node} has no inode number")
    return ((n + 1) << _SHIFT) | (node + 1)


def manifest_ino(n: int) -> int:
    if not 0 <= n <= MAX_EPOCH:
        raise NotFound(f"epoch {n} has no inode numbers (0..{MAX_EPOCH})")
    return _MANIFEST | n


def split_ino(ino: int) -> tuple[int, int] | None:
    """(epoch, node) of an epoch's inode number (node -1: the epoch folder); None for the others."""
    if ino & _MANIFEST or ino >> _SHIFT == 0:
        return None
    return (ino >> _SHIFT) - 1, (ino & _NODE_MASK) - 1


class Inodes:
    """Paths to inode numbers and back, over one :class:`View` (its trees are built on demand
    there); raises NotFound for what names nothing.

    The numbers of an epoch's nodes hold only while a rebuilt tree lays out the same nodes, which
    the contract (an epoch's file list never changes while it is visible) promises; each epoch's
    first tree leaves its shape here (four integers), and a tree of another shape names nothing
    (ENOENT) rather than the wrong file."""

    def __init__(self, view: View) -> None:
        self.view = view
        self._shapes: dict[int, tuple[int, int, int, int]] = {}

    def tree(self, n: int) -> EpochTree:
        """Epoch ``n``'s tree, checked against the shape its numbers were given with."""
        tree = self.view.tree(n)
        shape = tree.shape
        first = self._shapes.setdefault(n, shape)
        if first != shape:
            raise NotFound(f"epoch {n} changed since its inode numbers were given ({first} -> {shape})")
        if len(self._shapes) > 4 * TREES_KEPT + 64:  # forget retired epochs now and then
            live = self.view.snapshot.live
            for gone in [k for k in self._shapes if k not in live]:
                del self._shapes[gone]
        return tree

    def path(self, ino: int) -> str:
        """The absolute path of ``ino`` in the mount."""
        fixed = _FIXED.get(ino)
        if fixed is not None:
            return fixed
        if ino & _MANIFEST:
            return f"/{CONTROL_DIR}/{manifest_name(ino & ~_MANIFEST)}"
        split = split_ino(ino)
        if split is None:
            raise NotFound(f"inode {ino}")
        n, node = split
        if node == -1:
            return f"/{epoch_name(n)}"
        return f"/{epoch_name(n)}/{self.tree(n).path_of(node)}"

    def ino(self, path: str) -> int:
        """The inode number of absolute path ``path`` (which the caller has looked up)."""
        parts = split_path(path)
        if not parts:
            return ROOT_INO
        head = parts[0]
        if head == CONTROL_DIR:
            if len(parts) == 1:
                return CONTROL_INO
            if len(parts) == 2:
                if parts[1] == STATUS_NAME:
                    return STATUS_INO
                if parts[1] == CLASSES_NAME:
                    return CLASSES_INO
                m = parse_manifest_name(parts[1])
                if m is not None:
                    return manifest_ino(m)
            raise NotFound(path)
        if head == LATEST_NAME and len(parts) == 1:
            return LATEST_INO
        n = parse_epoch_name(head)
        if n is None:
            raise NotFound(path)
        if len(parts) == 1:
            return epoch_ino(n)
        return epoch_ino(n, self.tree(n).node_of("/".join(parts[1:])))

    def first_child_ino(self, path: str) -> int | None:
        """For a folder inside an epoch: the inode number of its first entry (its listing's entry
        ``i`` is that plus ``i``); None for the root and ``.epochfs`` (few entries, named one by one)."""
        parts = split_path(path)
        n = parse_epoch_name(parts[0]) if parts else None
        if n is None:
            return None
        return epoch_ino(n, self.tree(n).first_child("/".join(parts[1:])))
