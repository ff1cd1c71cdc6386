"""The SQLite URI filename every connection to a cache's index opens it by.

SQLite opens a plain path with ``SQLITE_OPEN_CREATE``: a process opening the index just after it
is deleted (the sampler's listing process, starting) would make an empty ``index.sqlite`` in its
place. The running sampler would then see an index replaced by one it cannot open, not a deleted
one, and would not exit for its next start to rebuild it; every later opener would take the empty
file for damage. A URI names the mode instead: ``ro`` for a reader, ``rw`` for an index that is
there (never made), ``rwc`` only where a new cache's index is to be made.

The path is percent-encoded from its bytes, so that any folder name opens (SQLite decodes
``%XX``; a ``?`` or ``#`` in a plain ``file:`` URI would end the path).
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path
from typing import Literal

Mode = Literal["ro", "rw", "rwc"]


def uri(path: str | os.PathLike[str], mode: Mode, *, immutable: bool = False) -> str:
    """``file:`` URI of ``path`` opened in ``mode``; ``immutable``: read as it is on disk, with
    no lock and no ``-wal``/``-shm`` made (a check that must not touch a live index)."""
    quoted = urllib.parse.quote(os.fsencode(os.path.abspath(Path(path))))
    return f"file:{quoted}?mode={mode}" + ("&immutable=1" if immutable else "")


__all__ = ["Mode", "uri"]
