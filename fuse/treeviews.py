"""Read-only views over an :class:`~epochfs.fuse.tree.EpochTree`: a folder's listing, every
symlink, every folder -- made from the tree's arrays when asked, never stored per file.

Apart from :mod:`.tree` (how the arrays are built and searched) because these are the shapes
callers see: readdir (a sequence whose index is the readdir offset), the folder view's writer
(links and folders as a mapping and a set).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence, Set
from typing import TYPE_CHECKING, overload

if TYPE_CHECKING:
    from epochfs.fuse.tree import Attr, EpochTree


class Listing(Sequence[tuple[str, "Attr"]]):
    """A folder's entries, (name, attributes) made when asked: index ``i`` is readdir offset ``i``."""

    def __init__(self, tree: EpochTree, first: int, count: int) -> None:
        self._tree = tree
        self._first = first
        self._count = count

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, i: int) -> tuple[str, Attr]: ...

    @overload
    def __getitem__(self, i: slice) -> list[tuple[str, Attr]]: ...

    def __getitem__(self, i: int | slice) -> tuple[str, Attr] | list[tuple[str, Attr]]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._count))]
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError(i)
        node = self._first + i
        return self._tree.name_of(node), self._tree.attr_of(node)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Listing({list(self)!r})"


class Links(Mapping[str, str]):
    """Relative path -> symlink target of every file of a tree, answered from its arrays."""

    def __init__(self, tree: EpochTree) -> None:
        self._tree = tree

    def __getitem__(self, rel: str) -> str:
        try:
            return self._tree.readlink(rel)
        except LookupError:
            raise KeyError(rel) from None

    def __iter__(self) -> Iterator[str]:
        return (rel for rel, is_dir in self._tree.walk() if not is_dir)

    def __len__(self) -> int:
        return self._tree.files_shown


class Dirs(Set[str]):
    """The relative paths of every folder of a tree (``""`` its root), answered from its arrays."""

    def __init__(self, tree: EpochTree) -> None:
        self._tree = tree

    def __contains__(self, rel: object) -> bool:
        if not isinstance(rel, str):
            return False
        try:
            return self._tree.lookup(rel).is_dir
        except LookupError:
            return False

    def __iter__(self) -> Iterator[str]:
        return (rel for rel, is_dir in self._tree.walk() if is_dir)

    def __len__(self) -> int:
        return self._tree.folder_count
