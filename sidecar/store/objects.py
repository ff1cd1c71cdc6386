"""Object files on the node volume: names, temp files, atomic installs, removal and the scan that
recovery needs.

An object is named from its sample id (a hash of the key), never from the key, so a hostile key
can never name a file. It becomes visible only after temp -> fsync (by the writer) -> rename ->
directory fsync; the index row is committed after that, so a crash leaves at worst an object the
index does not know (an orphan), never an index row without its object. Renames and unlinks
are told to a :class:`RecoveryJournal` (the store's :class:`.journal.Journal`), so that the next
start checks only the names a crash can have left out of step, not every object.

The sidecar's other files (the store's small files and members files, the supervisor's state file,
an index written to a local path) replace their old version through :func:`staged` and
:func:`replace_file` here: temp beside the target, fsync, rename, folder fsync, the temp removed on
a failure. tests/sidecar/test_one_atomic_writer.py keeps other renames from creeping in.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Protocol

from epochfs.sidecar.store import fanout
from epochfs.sidecar.store.fanout import FOLDER_MODE
from epochfs.sidecar.store.records import Admission

log = logging.getLogger("epochfs.store")

OBJECTS_DIR = "objects"
TMP_DIR = "tmp"
SHOWN_FOLDERS = 5
"""Paths of folders found among the object files that one warning names, at most."""
MARKER_PREFIX = ".epochfs-cache-"
"""The name of the cache's marker in ``objects/``: an empty folder ``.epochfs-cache-<32 hex>``, made
once per cache with a random name, by which a ``--link-root`` is told to be a view of this cache's
objects folder (``fuse.mounting.check_link_root_view``): what it shows must hold the same name. A
folder, not a file: the scans read only the fan-out folders' entries, and an empty folder has none."""


def markers(objects_dir: Path) -> list[str]:
    """The names of the marker folders in ``objects_dir`` (usually one; two starts that raced both
    made one); none when it cannot be listed."""
    try:
        with os.scandir(objects_dir) as entries:
            return sorted(e.name for e in entries if e.name.startswith(MARKER_PREFIX))
    except OSError:
        return []


def ensure_marker(objects_dir: Path) -> None:
    """Make the cache's marker folder unless it has one (an older cache gets it at its next open);
    nothing where the folder cannot be written (a read-only open of someone else's cache)."""
    if markers(objects_dir):
        return
    with contextlib.suppress(OSError):
        os.mkdir(objects_dir / f"{MARKER_PREFIX}{os.urandom(16).hex()}", 0o755)


def make_folder(path: Path) -> None:
    """Make ``path`` (its parents too) with :data:`FOLDER_MODE` whatever the umask; one already
    there is left as it is (its mode is its owner's choice)."""
    if path.is_dir():
        return
    if not path.parent.is_dir():
        make_folder(path.parent)
    try:
        os.mkdir(path)
    except FileExistsError:  # made by another process meanwhile: theirs (a file there: an error)
        if path.is_dir():
            return
        raise
    os.chmod(path, FOLDER_MODE)


def open_to_readers(folder: Path) -> None:
    """Add the read and traverse bits of :data:`FOLDER_MODE` to a folder of the store's that lacks
    them: one another process made under its umask (0700 with 077) before the store used it, such
    as a new cache's folder made by the CLI's check. Never taken away; one that is not ours
    (EPERM), or on a read-only volume, is left as it is."""
    with contextlib.suppress(OSError):
        mode = stat.S_IMODE(folder.stat().st_mode)
        if mode & FOLDER_MODE != FOLDER_MODE:
            os.chmod(folder, mode | FOLDER_MODE)


def object_name(sid: str) -> str:
    """Object file name (relative to ``objects/``) of a sample id: fanned out by its first byte."""
    return f"{sid[:2]}/{sid}"


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make the names in folder ``path`` durable (a rename is durable once its folder is fsynced).
    The torch client's publishing steps hold the same function: the store imports nothing of the
    client, nor the client anything of the sidecar."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_beside(target: Path) -> Path:
    """A new temp name for ``target`` in its own folder (a rename within one file system):
    ``.<name>.<pid>.<random>.tmp``. Hidden, so a listing of the folder passes over it; its
    writer's pid for :func:`clear_replace_temps`; random, so two writers of one target (two
    threads, two supervisors on one cache) never write into one temp."""
    return target.parent / f".{target.name}.{os.getpid()}.{os.urandom(6).hex()}.tmp"


class Staged:
    """A new file for ``target`` written under the name ``temp`` beside it (by the caller, who
    fsyncs what it writes), put in place by :meth:`install`; see :func:`staged`."""

    def __init__(self, target: Path, temp: Path) -> None:
        self.target = target
        self.temp = temp
        self.installed = False

    def install(self) -> None:
        """Rename the temp over the target: a reader opens the old file or the new one, whole.
        Called where the caller decides (under its lock, after a last check); the folder's fsync
        follows when the :func:`staged` block ends."""
        os.replace(self.temp, self.target)
        self.installed = True


@contextlib.contextmanager
def staged(target: Path, temp: Path | None = None, *, strict: bool = True) -> Iterator[Staged]:
    """The one way a file of the sidecar replaces another: the caller writes and fsyncs
    ``staged.temp`` (:func:`temp_beside` unless it names its own, in ``target``'s folder) and
    calls :meth:`Staged.install`. A block left with the file installed fsyncs the folder, so the
    rename outlives a crash; a block left without (a failure, an early return, a temp that turned
    out not to be wanted) removes the temp. ``strict`` False: a folder that refuses its fsync (some
    network and FUSE file systems; readers see the new file all the same) is not an error."""
    s = Staged(target, temp_beside(target) if temp is None else temp)
    try:
        yield s
    finally:
        if not s.installed:
            with contextlib.suppress(OSError):  # gone, or never made: the block's own error stands
                os.unlink(s.temp)
    if s.installed:
        try:
            fsync_dir(target.parent)
        except OSError:
            if strict:
                raise


def replace_file(target: Path, data: bytes | Iterable[bytes], *, mode: int = 0o644,
                 before_rename: Callable[[int], None] | None = None, strict: bool = True) -> None:
    """Replace the file ``target`` atomically and durably with ``data`` (bytes, or pieces of it
    written in turn, never all in memory): a new temp (:func:`temp_beside`, created ``mode``
    under the umask), written, fsynced, renamed over it, its folder fsynced (:func:`staged`).
    ``before_rename(fd)``: a last touch of the written file (its owner and mode). OSError (ENOSPC...)
    when it cannot; the temp never outlives a failure here, only a kill -9 (then
    :func:`clear_replace_temps`)."""
    with staged(target, strict=strict) as s:
        fd = os.open(s.temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        try:
            for piece in (data,) if isinstance(data, (bytes, bytearray, memoryview)) else data:
                view = memoryview(piece)
                while view:  # write(2) may write part of it (a disk filling up): the rest, or ENOSPC
                    view = view[os.write(fd, view):]
            if before_rename is not None:
                before_rename(fd)
            os.fsync(fd)
        finally:
            os.close(fd)
        s.install()


def writer_gone(pid: str) -> bool:
    """Whether a temp file whose name carries ``pid`` was left by a writer that is gone, for the
    start-up recovery that clears such temps. Another live process's temp is being written right
    now and stays. This process's own pid counts as gone: recovery runs before this process starts
    any writer, so a temp with its pid is a killed predecessor's (a restarted container gets a fresh
    PID namespace and often the same pid), which a check of ``/proc`` alone would keep forever.
    A name without a pid is nobody's."""
    if not (pid.isascii() and pid.isdigit()):
        return True
    return int(pid) == os.getpid() or not os.path.exists(f"/proc/{pid}")


def clear_replace_temps(target: Path) -> int:
    """Remove the temps :func:`replace_file` left for ``target`` when its writer died between
    writing and renaming (kill -9); see :func:`writer_gone` for whose temps stay. A temp's name
    is ``.<name>.<pid>.<random>.tmp``: its pid is the first part after the name (a name with no
    random part, ``.<name>.<pid>.tmp``, reads the same)."""
    removed = 0
    for path in target.parent.glob(f".{target.name}.*.tmp"):
        if not writer_gone(path.name[len(target.name) + 2:-len(".tmp")].partition(".")[0]):
            continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed += 1
    return removed


class RecoveryJournal(Protocol):
    """Told before objects are renamed into place and after they are unlinked."""

    def before_install(self, sids: list[str]) -> None: ...

    def removed(self, sids: list[str]) -> None: ...


def _mounts_within(path: str) -> list[str]:
    """The mount points at ``path`` or below it (``/proc/self/mountinfo``; its octal escapes
    read back). ``os.path.ismount`` compares device numbers, so a bind mount of a folder of the
    same filesystem passes it, and it looks at one folder only."""
    top = os.path.realpath(path)
    found = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                fields = line.split(" ")
                if len(fields) > 4:
                    point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), fields[4])
                    if point == top or point.startswith(top.rstrip("/") + "/"):
                        found.append(point)
    except OSError:  # no /proc: nothing can be told apart, so the tree is not removed
        return [top]
    return found


def _remove_temp_tree(path: str) -> int:
    """Remove the folder ``path`` found in the store's ``tmp/`` with what it holds (its links
    removed, never followed); 1 when it is gone, else 0 and one logged line. A tree with a mount
    point in it (at its top or deeper) is left as it is, whole: what a mount shows is not the
    store's to remove (``shutil.rmtree`` would empty it and fail only at its mount point)."""
    mounts = _mounts_within(path)
    if mounts:
        log.warning("%s: a mount in the cache's temp folder (%s), left in place with everything in "
                    "it; unmount it (nothing may be mounted inside the cache folder)", path, mounts[0])
        return 0
    failed: list[str] = []

    def note(_func: object, where: str, exc: BaseException | tuple[object, BaseException, object]) -> None:
        error = exc[1] if isinstance(exc, tuple) else exc  # onerror's exc_info, onexc's exception
        if not isinstance(error, FileNotFoundError):
            failed.append(f"{where}: {error}")

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=note)
    else:  # onexc is 3.12's; onerror is deprecated there
        shutil.rmtree(path, onerror=note)
    if failed:
        log.warning("could not remove the folder %s from the cache's temp folder (%s; %d error(s)): "
                    "left in place", path, failed[0], len(failed))
        return 0
    log.info("removed the folder %s from the cache's temp folder (none of the store's: a view "
             "published there?)", path)
    return 1


class ObjectFiles:
    """The ``objects/`` and ``tmp/`` folders of one cache."""

    journal: RecoveryJournal | None = None
    """Set by the store: renames are journaled before they happen, unlinks after."""

    def __init__(self, root: Path) -> None:
        self.objects_dir = root / OBJECTS_DIR
        self._objects = str(self.objects_dir)
        self.tmp_dir = root / TMP_DIR
        make_folder(self.objects_dir)
        open_to_readers(self.objects_dir)  # made by another process under its umask, perhaps
        self.tmp_dir.mkdir(exist_ok=True)  # private: only the store reads it
        ensure_marker(self.objects_dir)

    def path_of(self, sid: str) -> Path:
        return self.objects_dir / object_name(sid)

    def temp_path(self) -> Path:
        """A fresh temp file name for one download (in tmp/, removed at start-up if left)."""
        return self.tmp_dir / f"{os.urandom(16).hex()}.part"

    def install(self, items: Iterable[Admission]) -> list[Admission]:
        """Rename fsynced temp files into place, read-only, and fsync the folders they went to
        (their names committed to the journal first: a crash before the index commit leaves
        orphans that the next start finds there); returns those installed. Each goes through
        :mod:`.fanout`, which crosses no link: a temp that is not the file its download wrote
        (:class:`.fanout.Swapped`) is removed and left out, with a warning; the caller admits
        the rest and the key is fetched again in its turn."""
        items = list(items)
        if self.journal is not None:
            self.journal.before_install([a.sid for a in items])
        fans: dict[str, int] = {}
        done: list[Admission] = []
        try:
            for a in items:
                fan = a.sid[:2]
                try:
                    if fan not in fans:
                        fans[fan] = fanout.open_fan(self._objects, fan)
                    fanout.install(a.temp, a.inode, fans[fan], a.sid)
                except fanout.Swapped as e:
                    with contextlib.suppress(OSError):
                        os.unlink(a.temp)
                    log.warning("not admitting %r: %s (another process on the cache volume?): "
                                "dropped, fetched again in its turn", a.key, e)
                    continue
                done.append(a)
            for fd in fans.values():
                os.fsync(fd)
        finally:
            for fd in fans.values():
                os.close(fd)
        return done

    def remove(self, sids: Iterable[str]) -> None:
        """Unlink objects (their rows already gone), then tell the journal."""
        done = []
        for sid in sids:
            self.unlink(sid)
            done.append(sid)
        if self.journal is not None:
            self.journal.removed(done)

    def unlink(self, sid: str) -> bool:
        """Remove one object file (recovery's own, journal untouched); False when it was not there.
        Never through a link planted at its fan-out folder (:func:`.fanout.unlink`)."""
        return fanout.unlink(self._objects, sid[:2], sid)

    def size_of(self, sid: str) -> int:
        """The object's size in bytes, -1 when it is missing. A plain string path: pathlib
        interns every name it parses, which grows with the samples recovery checks."""
        try:
            return os.stat(f"{self._objects}/{object_name(sid)}").st_size
        except FileNotFoundError:
            return -1

    def clear_temps(self) -> int:
        """Remove every temp file (partial downloads of a previous run); returns how many.

        A folder there is none of the store's: a view published into ``tmp/`` (``epochfs publish``
        took such a ``--mount`` before it was refused) left its epoch folders, and the sampler
        crashed at every start on them (IsADirectoryError). Removed as one temp tree
        (:func:`_remove_temp_tree`); one that cannot be is left, with one logged line: it never
        stops a start."""
        removed = 0
        for entry in os.scandir(self.tmp_dir):
            if entry.is_dir(follow_symlinks=False):
                removed += _remove_temp_tree(entry.path)
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
                removed += 1
        return removed

    def names(self) -> Iterator[os.DirEntry[str]]:
        """Every object file (sample ids as names) under the fan-out folders. A folder among them
        is none of the store's (objects are files; another program's, or a dataset put there):
        passed over and left in place, never removed as an orphan, and logged once a pass."""
        folders: list[str] = []
        for fan in os.scandir(self.objects_dir):
            if fan.is_dir(follow_symlinks=False):
                for entry in os.scandir(fan.path):
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.path)
                        continue
                    yield entry
        if folders:
            shown = ", ".join(folders[:SHOWN_FOLDERS]) + (", ..." if len(folders) > SHOWN_FOLDERS else "")
            log.warning("left %d folder(s) in %s that are none of the store's (its objects are files): "
                        "%s; move them out of the cache", len(folders), self.objects_dir, shown)

    def remove_orphans(self, known: Callable[[list[str]], set[str]], *, batch: int = 1024) -> int:
        """Remove object files whose sample id the index does not know; returns how many.

        ``known(names)`` answers which of a batch of names the index holds, so only one batch of
        names is in memory at a time, whatever the number of objects."""
        orphans = 0
        entries: list[os.DirEntry[str]] = []

        def flush() -> None:
            nonlocal orphans
            held = known([e.name for e in entries])
            for entry in entries:
                if entry.name not in held:
                    orphans += fanout.unlink(self._objects, os.path.basename(os.path.dirname(entry.path)),
                                             entry.name)
            entries.clear()

        for entry in self.names():
            entries.append(entry)
            if len(entries) >= batch:
                flush()
        if entries:
            flush()
        return orphans
