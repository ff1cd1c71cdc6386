"""Samples the remote lost, as the folder view publishes them: ``.epochfs/lost.json`` and a log line.

Why a record and not an error on the entry: without FUSE no process sits on the read path, so
nothing can answer EIO. An entry of an epoch is a symlink into the objects folder; once its
sample is lost its object file is gone and the kernel answers ENOENT, the same as for a missing
file. The folder view cannot honestly do better (docs/folderview.md, "A sample the remote lost"):

* turning the entry into a link to a kernel file that fails its reads means rewriting published,
  hard-linked entries, and no such file fails every read: ``/proc/self/mem`` answers EIO at
  offset 0 but returns the reader's own memory at a mapped offset (4 MiB up with a non-PIE
  interpreter such as Debian's ``/usr/bin/python3``), wrong bytes for an indexed shard reader;
  a namespace handle (``/proc/self/ns/net``) answers EINVAL and depends on the runtime's /proc;
* an empty file, a FIFO, a socket, a folder or a mode-0 file give no bytes, block, or change the
  entry's type (a listing that keeps regular files only would drop it), or root reads them.

So the entry stays what it was published as (the epoch is never rewritten), and the loss is
published beside it, exactly: ``.epochfs/lost.json`` names every lost sample by its path inside
the epochs, its object file and size, so that a reader (the torch client:
:mod:`epochfs.torchclient.lost`; a script: one lookup) tells a lost sample from a missing file
without guessing. The file exists only while samples are lost (a folder without losses is the
FUSE view's layout); it is written with temp + rename before ``status.json`` counts the loss in
the same step. Each newly lost sample is logged once (WARNING, at most :data:`LOG_LINES` lines a
change, the rest summed up in one line).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from epochfs.sidecar.store import Store
from epochfs.sidecar.store.integrity import LostDigest
from epochfs.torchclient.lost import LOST_NAME

log = logging.getLogger("epochfs.folderview")

LOG_LINES = 10
"""Newly lost samples logged one by one in a change; the rest are counted in one line."""

Write = Callable[[str, bytes], None]
"""Replaces ``.epochfs/<name>`` with the bytes (temp + rename)."""
Remove = Callable[[str], None]
"""Removes ``.epochfs/<name>`` (no error when absent)."""


class LostRecord:
    """Keeps ``.epochfs/lost.json`` equal to the store's lost samples; :meth:`update` each step."""

    def __init__(self) -> None:
        self._digest: LostDigest | None = None
        self._paths: frozenset[str] = frozenset()

    def update(self, store: Store, write: Write, remove: Remove) -> bool:
        """Rewrite the record if the store's set changed (one small query otherwise); True when
        it did. A failed write (a full volume) raises and is tried again at the next update."""
        digest, entries = store.lost_samples(unless=self._digest)
        if entries is None:
            return False
        if entries:
            doc = {"count": len(entries),
                   "lost": [{"path": e.path, "object": e.object_name, "size": e.size} for e in entries]}
            write(LOST_NAME, (json.dumps(doc, indent=1) + "\n").encode())
        else:
            remove(LOST_NAME)
        paths = frozenset(e.path for e in entries)
        self._say(sorted(paths - self._paths), len(paths))
        self._digest, self._paths = digest, paths
        return True

    @staticmethod
    def _say(new: list[str], total: int) -> None:
        for path in new[:LOG_LINES]:
            log.warning("%s: its sample was lost from the remote (it cannot be fetched again): its entry "
                        "stays listed in every published epoch that holds it, a dangling link (a plain "
                        "open gets ENOENT: the folder view has no server to answer EIO); .epochfs/%s "
                        "lists it, the torch client raises SampleLostError", path, LOST_NAME)
        if len(new) > LOG_LINES:
            log.warning("%d more sample(s) lost from the remote (%d in all), listed in .epochfs/%s",
                        len(new) - LOG_LINES, total, LOST_NAME)
