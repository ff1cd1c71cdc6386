"""Samples the remote lost, as the folder view publishes them: a placeholder entry that answers
ELOOP, ``.epochfs/lost.json`` and a log line.

Why a placeholder: without FUSE no process sits on the read path, so nothing can answer EIO. An
entry of an epoch is a symlink into the objects folder; once its sample is lost its object file
is gone and the kernel answers ENOENT, the answer of a missing file and of a mount being replaced,
which every reader (the torch client too) takes for "gone" or "retry". So, given the published
folder (:class:`LostRecord` with ``folder``), each lost sample's entry in every published epoch
that holds it is replaced by its *placeholder*: a symlink of the same name whose target is that
name and a mark (:func:`epochfs.torchclient.lost.placeholder_target`), a link to itself. A
listing (``os.listdir``, ``os.walk``, ``glob``, torchvision's ``ImageFolder``) still shows it, the
manifest is unchanged, and an open answers **ELOOP** at once, for root too, which no missing file
and no mount gives. Why ELOOP and not another errno: docs/folderview.md, "A sample the remote lost".

How: the placeholder is made under a temporary name of the folder (``.epochfs-lost-…``, which
recovery removes after a kill), then one ``rename`` replaces the entry: a reader sees the old
symlink or the placeholder, never neither, and never a temporary name inside an epoch. The entry's
folder (mode 0555 once published) is made writable for the owner for that rename only. Entries
are replaced only where they are still this sample's symlink (the target ends in its object
file); an epoch published later that holds the sample gets its placeholder in the next update.

The record: ``.epochfs/lost.json`` names every lost sample by its path inside the epochs, its
object file and size, so that a reader (the torch client: :mod:`epochfs.torchclient.lost`; a
script: one lookup) tells a lost sample from a missing file without guessing, also in the moment
between the loss and its placeholder (the record is written first). The file exists only while
samples are lost (a folder without losses is the FUSE view's layout); it is written with temp +
rename before ``status.json`` counts the loss in the same step. Each newly lost sample is logged
once (WARNING, at most :data:`LOG_LINES` lines a change, the rest summed up in one line).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
from collections.abc import Callable
from pathlib import Path

from epochfs.sidecar.store import Store
from epochfs.sidecar.store.integrity import LostDigest
from epochfs.torchclient.layout import epoch_name, parse_epoch_name
from epochfs.torchclient.lost import LOST_NAME, is_placeholder, placeholder_target
from epochfs.torchclient.publish import TEMP_PREFIX, fsync_dir, temp_path

log = logging.getLogger("epochfs.folderview")

LOG_LINES = 10
"""Newly lost samples logged one by one in a change; the rest are counted in one line."""

SCRATCH_PREFIX = f"{TEMP_PREFIX}lost-"
"""The folder where placeholders are made before their rename: one of the publisher's temporary
names (``TEMP_PREFIX``), so readers skip it and recovery removes it after a kill."""

Write = Callable[[str, bytes], None]
"""Replaces ``.epochfs/<name>`` with the bytes (temp + rename)."""
Remove = Callable[[str], None]
"""Removes ``.epochfs/<name>`` (no error when absent)."""


class LostRecord:
    """Keeps ``.epochfs/lost.json`` equal to the store's lost samples and, given the published
    ``folder``, their entries placeholders in every visible epoch; :meth:`update` each step."""

    def __init__(self, folder: Path | None = None) -> None:
        self._digest: LostDigest | None = None
        self._lost: dict[str, str] = {}  # path inside the epochs -> object file
        self.folder = folder
        self._placed: frozenset[int] = frozenset()  # visible epochs whose lost entries are placeholders

    def update(self, store: Store, write: Write, remove: Remove) -> bool:
        """Rewrite the record if the store's set changed (one small query otherwise), then put
        placeholders in the epochs that lack them; True when the set changed. A failed write (a
        full volume) raises and is tried again at the next update."""
        digest, entries = store.lost_samples(unless=self._digest)
        if entries is not None:
            if entries:
                doc = {"count": len(entries),
                       "lost": [{"path": e.path, "object": e.object_name, "size": e.size} for e in entries]}
                write(LOST_NAME, (json.dumps(doc, indent=1) + "\n").encode())
            else:
                remove(LOST_NAME)
            lost = {e.path: e.object_name for e in entries}
            self._say(sorted(lost.keys() - self._lost.keys()), len(lost))
            self._digest, self._lost = digest, lost
            self._placed = frozenset()  # a new set: every visible epoch is looked at again
        if self.folder is not None and self._lost:
            self._place(self.folder)
        return entries is not None

    def _place(self, folder: Path) -> None:
        """Placeholders for the lost entries of the visible epochs not yet done (a listing of the
        folder while samples are lost; nothing else when every epoch is done)."""
        try:
            visible = frozenset(n for n in map(parse_epoch_name, os.listdir(folder)) if n is not None)
        except FileNotFoundError:
            return
        todo = sorted(visible - self._placed)
        if not todo:
            self._placed = visible
            return
        scratch = temp_path(folder, SCRATCH_PREFIX, "placeholders")
        os.mkdir(scratch, 0o700)
        try:
            for n in todo:
                epoch = folder / epoch_name(n)
                for rel, obj in self._lost.items():
                    place(epoch / rel, obj, scratch)
        finally:
            with contextlib.suppress(OSError):
                for name in os.listdir(scratch):
                    os.unlink(scratch / name)
                os.rmdir(scratch)
        self._placed = visible

    def _say(self, new: list[str], total: int) -> None:
        how = ("its entry in every published epoch that holds it is replaced by a placeholder, a link "
               "to itself (a plain open gets ELOOP: the folder view has no server to answer EIO)"
               if self.folder is not None else
               "its entry stays listed in every published epoch that holds it, a dangling link (a plain "
               "open gets ENOENT: the folder view has no server to answer EIO)")
        for path in new[:LOG_LINES]:
            log.warning("%s: its sample was lost from the remote (it cannot be fetched again): %s; "
                        ".epochfs/%s lists it, the torch client raises SampleLostError", path, how, LOST_NAME)
        if len(new) > LOG_LINES:
            log.warning("%d more sample(s) lost from the remote (%d in all), listed in .epochfs/%s",
                        len(new) - LOG_LINES, total, LOST_NAME)


def place(entry: Path, obj: str, scratch: Path) -> bool:
    """Replace ``entry`` by its placeholder if it is the symlink to object file ``obj`` (an
    epoch that holds the lost sample); True when it was replaced. ``scratch``: a folder on the
    same file system, where the placeholder is made before one ``rename`` puts it in place."""
    try:
        target = os.readlink(entry)
    except OSError:
        return False  # not in this epoch (or not a symlink: nothing of ours)
    if is_placeholder(entry) or not (target == obj or target.endswith("/" + obj)):
        return False
    temp = scratch / secrets.token_hex(8)
    os.symlink(placeholder_target(entry.name), temp)
    parent = entry.parent
    mode = os.stat(parent).st_mode & 0o7777
    os.chmod(parent, mode | 0o200)
    try:
        os.rename(temp, entry)
    finally:
        os.chmod(parent, mode)
    fsync_dir(parent)
    return True
