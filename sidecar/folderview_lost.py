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
file). An epoch published later that holds the sample has its placeholder when it appears, so a
trainer listing the new ``epoch-N/`` never meets the dangling link: written whole, its entry is
made as the placeholder (:meth:`LostRecord.links`); built ahead, where the entry may be a hard
link made before the loss, it is replaced inside the tree before the rename that shows it
(:meth:`LostRecord.place_in`).

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
import errno
import json
import logging
import os
import secrets
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from epochfs.sidecar.store.integrity import LostDigest
from epochfs.sidecar.store.reader import FolderReader
from epochfs.torchclient.layout import epoch_name, parse_epoch_name
from epochfs.torchclient.lost import LOST_NAME, is_placeholder, placeholder_target
from epochfs.torchclient.publish import DIR_MODE, TEMP_PREFIX, fsync_dir, temp_path

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

    def update(self, store: FolderReader, write: Write, remove: Remove) -> bool:
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
        if todo:
            self._place_in([folder / epoch_name(n) for n in todo], folder, published=True)
        self._placed = visible

    def place_in(self, tree: Path) -> None:
        """Placeholders for the lost entries of ``tree``, an epoch's tree under a temporary name
        of the published folder, before it is shown: a reader never finds the epoch with the
        dangling link (its entries may be hard links made before the loss)."""
        if self._lost:
            self._place_in([tree], tree.parent)

    def links(self, links: Mapping[str, str]) -> Mapping[str, str]:
        """An epoch's entries (path -> target) to write whole, with each lost sample's entry its
        placeholder: in place when the epoch appears (``links`` itself is left as it is)."""
        lost = {rel: obj for rel, obj in self._lost.items()
                if (target := links.get(rel)) is not None and _links_to(target, obj)}
        if not lost:
            return links
        return _Replaced(links, {rel: placeholder_target(rel.rpartition("/")[2]) for rel in lost})

    def _place_in(self, epochs: list[Path], folder: Path, *, published: bool = False) -> None:
        """Placeholders in ``epochs``; ``published``: they are shown, and each folder of a lost
        entry is made read-only (``DIR_MODE``) again where a kill in :func:`place` left it
        writable (the first update after a start looks at every published epoch)."""
        scratch = temp_path(folder, SCRATCH_PREFIX, "placeholders")
        os.mkdir(scratch, 0o700)
        try:
            for epoch in epochs:
                for rel, obj in self._lost.items():
                    place(epoch / rel, obj, scratch)
                    if published:
                        _read_only(epoch / rel)
        finally:
            with contextlib.suppress(OSError):
                for name in os.listdir(scratch):
                    os.unlink(scratch / name)
                os.rmdir(scratch)

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
    if is_placeholder(entry) or not _links_to(target, obj):
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


def _read_only(entry: Path) -> None:
    """The folder of ``entry`` (if the epoch has it) back to ``DIR_MODE``."""
    parent = entry.parent
    try:
        if stat.S_IMODE(os.stat(parent).st_mode) != DIR_MODE:
            os.chmod(parent, DIR_MODE)
            log.info("%s: made read-only again (a publisher was stopped while it put a placeholder there)",
                     parent)
    except FileNotFoundError:
        pass
    except OSError as e:  # a key's folder whose path passes PATH_MAX: never given a placeholder either
        if e.errno != errno.ENAMETOOLONG:
            raise


def _links_to(target: str, obj: str) -> bool:
    """A symlink target names object file ``obj`` (under any link root)."""
    return target == obj or target.endswith("/" + obj)


class _Replaced(Mapping[str, str]):
    """``links`` with a few targets replaced, without a copy of the whole epoch (a tree's links
    are answered from its arrays: a million entries would be a million-key dict)."""

    def __init__(self, links: Mapping[str, str], replaced: dict[str, str]) -> None:
        self._links = links
        self._replaced = replaced

    def __getitem__(self, rel: str) -> str:
        return self._replaced[rel] if rel in self._replaced else self._links[rel]

    def __iter__(self) -> Iterator[str]:
        return iter(self._links)

    def __len__(self) -> int:
        return len(self._links)
