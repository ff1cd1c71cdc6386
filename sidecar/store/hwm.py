"""The high-water mark of epoch numbers, kept outside the SQLite index.

An epoch number, once published, must never come back with other content, even when the index
loses its newest transactions (a deleted or damaged write-ahead log rolls it back) or is reset
(a corrupt index moved aside). The index cannot vouch for that, since it is what was lost, so
``<cache>/epochs.hwm`` records two numbers, each written atomically (temp file, fsync, rename,
folder fsync) and only ever raised:

* ``cutting``: raised *before* a cut commits, inside the cut's write transaction (which
  serializes cutters across processes);
* ``published``: raised *after* the cut committed, in a write transaction of its own.

A cut that failed before its commit (a crash, a full disk) leaves ``cutting`` one above
``published`` while the index's newest epoch equals ``published``: that number was never seen
and may be cut. An index whose newest epoch is below ``published`` has lost published epochs:
every number up to ``cutting`` counts as used. See :func:`floor`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from epochfs.sidecar.store.objects import clear_replace_temps, replace_file

log = logging.getLogger("epochfs.store")

HWM_NAME = "epochs.hwm"
MAX_EPOCH = (1 << 29) - 2
"""The largest epoch number: the FUSE view's inode numbers have a block for each epoch up to it
(``torchclient/layout.py``'s MAX_EPOCH, the same number: the store imports nothing of the
client). A mark above it names no epoch the view can serve, so it is read as none (a cut never
writes one: the store refuses cuts above the limit)."""


@dataclass(frozen=True)
class HighWater:
    """The numbers in ``epochs.hwm`` (-1: none yet)."""

    published: int = -1
    cutting: int = -1

    def raised(self, *, published: int = -1, cutting: int = -1) -> HighWater:
        return HighWater(max(self.published, published), max(self.cutting, cutting, published))


_reported: set[tuple[str, str]] = set()
"""The damaged files already reported, with their text: the status document reads the mark twice
a second while a cache has no live epoch, and one error a damage is enough."""


def read(root: Path) -> HighWater | None:
    """The recorded marks; None when there is no file (a cache from before it, or no cut yet).

    A file that cannot be parsed (a damaged volume) is reported (once a process) and read as none:
    the index's own newest epoch is all that is left to go by."""
    try:
        text = (root / HWM_NAME).read_text(encoding="ascii", errors="replace")
    except FileNotFoundError:
        return None
    try:
        published, cutting = (int(x) for x in text.split())
    except ValueError:
        _report(root, text, f"{root / HWM_NAME} is damaged ({text[:40]!r}); epoch numbers "
                            "continue from the index alone")
        return None
    if max(published, cutting) > MAX_EPOCH:
        _report(root, text, f"{root / HWM_NAME} holds epoch {max(published, cutting)}, above the "
                            f"largest epoch number {MAX_EPOCH} (never shown by the view); epoch "
                            "numbers continue from the index alone")
        return None
    return HighWater(published, max(cutting, published))


def _report(root: Path, text: str, message: str) -> None:
    if (str(root), text) not in _reported:
        _reported.add((str(root), text))
        log.error("%s", message)


def write(root: Path, mark: HighWater) -> None:
    """Replace ``epochs.hwm`` atomically and durably; OSError (ENOSPC...) when it cannot."""
    replace_file(root / HWM_NAME, f"{mark.published} {mark.cutting}\n".encode())


def clear_temps(root: Path) -> int:
    """Remove the temp files of writers that died between writing and renaming (kill -9 during a
    cut); a live process's temp (a cut on lookup in the FUSE server, right now) is left alone."""
    return clear_replace_temps(root / HWM_NAME)


def raise_to(root: Path, *, published: int = -1, cutting: int = -1) -> None:
    """Raise the marks (never lower them); call while holding the index's write lock."""
    mark = read(root)
    new = (mark or HighWater()).raised(published=published, cutting=cutting)
    if new != mark:
        write(root, new)


def floor(mark: HighWater | None, newest: int | None) -> int | None:
    """The highest epoch number that may never be cut again (None: any number may be cut).

    ``newest`` is the index's newest epoch. While it is at or above ``published`` the index has
    every published epoch, and a ``cutting`` above it was never committed; below ``published``
    the index lost epochs, and every number up to ``cutting`` may have been seen."""
    top = -1 if newest is None else newest
    if mark is not None and top < mark.published:
        top = max(top, mark.cutting)
    return None if top < 0 else top
