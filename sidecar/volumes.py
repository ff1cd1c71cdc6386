"""The volume checks every command runs before it opens a path a flag names: ``--cache`` and the
folder view's ``--mount``, refused in one line naming the flag (never a traceback from a bad
path), apart from the settings' declarations in :mod:`.config`, which only parse values.

The folder view writes into a folder it shares with whatever else is there, so it also needs to
know what is its own: :func:`published_folder` (the start check: a folder that is not empty must
be one the publisher wrote before) and :func:`published_epoch` (recovery and retirement remove
only an ``epoch-N/`` the publisher wrote: a user's folder of that name is never deleted)."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from epochfs.sidecar.config import ConfigError
from epochfs.sidecar.remote.urls import local_root
from epochfs.sidecar.samplerlock import LOCK_NAME, SIDECAR_PID_NAME
from epochfs.sidecar.store import HWM_NAME, INDEX_NAME, OBJECTS_DIR, QUARANTINE_DIR, TMP_DIR
from epochfs.sidecar.store.checkmark import MARKER_NAME
from epochfs.sidecar.store.foreign import SHOWN_FOREIGN, blank_damage, foreign_entries, foreign_index
from epochfs.sidecar.store.index import MISSING, SHM_SUFFIX, WAL_SUFFIX, BlankIndex
from epochfs.sidecar.store.memberformat import MEMBERS_DIR
from epochfs.sidecar.store.objects import MARKER_PREFIX
from epochfs.sidecar.store.placement import inside, named, over_cache, spelled
from epochfs.sidecar.store.publisherlock import LOCK_NAME as PUBLISHER_LOCK_NAME
from epochfs.sidecar.store.repairlog import LOG_NAME as REPAIRS_LOG_NAME
from epochfs.sidecar.store.reset import LOCK_NAME as INDEX_LOCK_NAME
from epochfs.sidecar.store.stats import STATE_FILE_NAME
from epochfs.torchclient.layout import CONTROL_DIR, epoch_name, manifest_name, read_status

CACHE_HINT = "start `epochfs sample` or `epochfs sidecar` with this --cache first"


def _mount_given(path: Path) -> str | None:
    """The hint for a view's mount given where its cache goes (``--cache /mnt/epochfs``): its
    ``status.json`` names the cache's folder (``shard.node``, ``host:/path``). None elsewhere."""
    doc = read_status(path)
    if doc is None:
        return None
    shard = doc.get("shard")
    node = shard.get("node") if isinstance(shard, dict) else None
    cache = node.partition(":")[2] if isinstance(node, str) and ":" in node else None
    at = f" of the cache in {cache}: give that as --cache" if cache else ": give its cache's folder"
    return f"{path} is an epochfs view{at} (a view's own state: epochfs status --mount {path})"


def _os_reason(e: OSError) -> str:
    """The system's words for ``e`` ("permission denied", "read-only file system")."""
    text = os.strerror(e.errno) if e.errno else (str(e) or type(e).__name__)
    return text[:1].lower() + text[1:]


def _nearest_existing(path: Path) -> Path | None:
    return next((p for p in path.parents if os.path.lexists(p)), None)


def _stat_or_none(path: Path, where: str) -> os.stat_result | None:
    """``path``'s stat, None where nothing is there; another failure is the flag's one line."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise ConfigError(f"{where}: {_os_reason(e)}") from None


def _refuse_dangling(path: Path, where: str) -> None:
    """A ``path`` that is a symlink to nothing (``stat`` found nothing there), refused in one line
    naming the folder it points to: taken for a missing folder, it was "made" (``mkdir`` answers
    EEXIST: "cannot create it: File exists") and then could not be written ("no such file or
    directory"), neither saying that the link's folder is what is missing. That folder is not made
    here: a link names a place someone chose (another volume, not mounted yet, perhaps)."""
    try:
        target = os.readlink(path)
    except OSError:
        return  # not a link: really nothing there
    real = spelled(path)
    said = "" if target == real else f" (it points to {target})"
    raise ConfigError(f"{where}: a symlink to a missing folder, {real}{said}: make that folder, or "
                      f"give the path of an existing one")


WRITTEN_FILES = (INDEX_NAME, INDEX_NAME + WAL_SUFFIX, INDEX_NAME + SHM_SUFFIX, INDEX_LOCK_NAME,
                 MARKER_NAME, LOCK_NAME, SIDECAR_PID_NAME, PUBLISHER_LOCK_NAME, HWM_NAME, REPAIRS_LOG_NAME,
                 STATE_FILE_NAME)
"""The files at a cache's top that its writers open for writing (each where it is there)."""

WRITTEN_FOLDERS = (OBJECTS_DIR, TMP_DIR, MEMBERS_DIR, QUARANTINE_DIR)
"""The folders at a cache's top its writers make, fill and empty; with the fan-out folders of
``objects/`` and the members files of ``epochs/``, which are written, appended to and removed."""


def _folder_entries(folder: Path) -> list[Path]:
    """What in the cache folder ``folder`` is written besides the folder itself: the fan-out
    folders of ``objects/`` (not its marker, made once and never written) and the members files
    of ``epochs/``; none of ``tmp/`` (its temporaries are removed, which the folder's right is
    enough for). A few hundred entries at most: the object files are never opened for writing."""
    if folder.name not in (OBJECTS_DIR, MEMBERS_DIR):
        return []
    try:
        with os.scandir(folder) as entries:
            names = sorted(e.name for e in entries if not e.name.startswith(MARKER_PREFIX))
    except OSError:
        return []  # the folder's own check refuses it
    return [folder / name for name in names]


def unwritable_entry(cache: Path) -> Path | None:
    """The first of the cache's own files and folders (:data:`WRITTEN_FILES`,
    :data:`WRITTEN_FOLDERS`) this process may not write, else None. Tried with ``access(2)``, which
    opens nothing: a descriptor of the index opened and closed here would drop the locks of this
    process's SQLite connections on it. A folder must take new entries (write and search)."""
    for name in WRITTEN_FILES:
        entry = cache / name
        if not os.access(entry, os.W_OK) and os.path.lexists(entry):
            return entry
    for name in WRITTEN_FOLDERS:
        folder = cache / name
        if not os.path.lexists(folder):
            continue
        for entry in (folder, *_folder_entries(folder)):
            wanted = os.W_OK | os.X_OK if entry.is_dir() else os.W_OK
            # An entry gone since the listing (a temp file another process of the sidecar
            # renamed over its final name) is no refusal: access(2) fails on it all the same.
            if not os.access(entry, wanted) and os.path.lexists(entry):
                return entry
    return None


def unwritable_refusal(cache: Path, entry: Path, reason: str = "permission denied") -> str:
    """The one line refusing ``--cache`` because ``entry`` in it cannot be written: its owner and
    the fix. A cache filled by another user (root's sidecar, then a non-root one on the same
    hostPath) has a folder the new user may be given and files still the old one's; unrefused,
    the first write ends in a traceback (the sampler's lock, the index's "attempt to write a
    readonly database"), which the sidecar restarts for ever as a crash."""
    me = os.geteuid()
    try:
        st = os.lstat(entry)
    except OSError:
        return f"--cache {cache}: cannot write in it: {entry}: {reason}"
    if st.st_uid == me:
        return (f"--cache {cache}: cannot write in it: {entry} (mode {stat.S_IMODE(st.st_mode):04o}, "
                f"this user's): {reason}; give its user write access (chmod -R u+w {cache})")
    return (f"--cache {cache}: cannot write in it: {entry} belongs to uid {st.st_uid}, not to this "
            f"user (uid {me}): {reason}; run as uid {st.st_uid}, or give the cache to this user "
            f"(chown -R {me} {cache})")


def check_cache(path: Path, *, create: bool, unwritable_hint: str = "", writes: bool = True) -> None:
    """Refuse a ``--cache`` that cannot be used with one line naming it, ``--cache PATH: reason``,
    before a command opens it (never a traceback from a bad path).

    ``create`` (``sample``, ``sidecar``): the folder is made when missing, as the store would make
    it, so a path that cannot be made (under ``/proc``, below a file, on a read-only file system,
    permission denied) is refused here. Without it (``mount``, ``publish``, ``cut``, ``relist``,
    ``verify``, ``status``) an epochfs cache must be there already: a missing folder, or one
    without the index, is refused naming the commands that make one (but a cache whose index was
    deleted, its epochs and objects still there, is refused as damage the sampler's next start
    rebuilds: :func:`.store.foreign.blank_damage`); and one whose index is not
    epochfs's (another program's SQLite database, an empty file: :func:`.store.foreign.foreign_index`),
    before anything is written in it, which the store's open would do (its schema, WAL mode,
    ``objects/``, ``tmp/``): an empty cache would be reported over someone else's folder. Either
    way the folder must take a new file: SQLite writes beside its index even to read it (WAL).
    ``unwritable_hint``: what a command that only reads (``status``) can do instead, added to
    the refusal of a folder it cannot write in (a read-only mount of the cache).

    ``writes``: the command writes in the cache (all but ``status``), so the cache's own files
    and folders must be writable too (:func:`unwritable_entry`), else refused in one line naming
    the first one, its owner and the fix (:func:`unwritable_refusal`). A reader needs only the
    folder: SQLite reads an index it may not write."""
    where = f"--cache {path}"
    st = _stat_or_none(path, where)
    if st is None:
        _refuse_dangling(path, where)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{where}: exists and is not a directory")
    if st is None:
        if not create:
            raise ConfigError(f"{where}: no epochfs cache there (the folder does not exist); {CACHE_HINT}")
        parent = _nearest_existing(path)
        if parent is not None and not parent.is_dir():
            raise ConfigError(f"{where}: cannot create it: {parent} is not a directory")
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            inside = f" in {parent}" if parent is not None else ""
            raise ConfigError(f"{where}: cannot create it{inside}: {_os_reason(e)}") from None
    elif not os.path.lexists(path / INDEX_NAME):
        if not create:
            damage = blank_damage(path, MISSING)
            if damage is not None:  # a deleted index: the words of any damaged index's refusal
                raise ConfigError(f"--cache: {BlankIndex(path / INDEX_NAME, damage)}")
            raise ConfigError(f"{where}: no epochfs cache there (no {INDEX_NAME}); "
                              f"{_mount_given(path) or CACHE_HINT}")
        if (view := _mount_given(path)) is not None:
            # sample and sidecar would make a cache inside the folder the trainers read (a folder view).
            raise ConfigError(f"{where}: {view}")
        if theirs := foreign_entries(path):  # a cache's start removes them (every temp, every orphan)
            shown = ", ".join(theirs[:SHOWN_FOREIGN]) + (", ..." if len(theirs) > SHOWN_FOREIGN else "")
            raise ConfigError(f"{where}: not an epochfs cache (no {INDEX_NAME}), and its {TMP_DIR}/ or "
                              f"{OBJECTS_DIR}/ hold what no cache makes ({shown}), which a cache's start "
                              "would remove: give an empty folder or a cache")
    elif (why := foreign_index(path / INDEX_NAME)) is not None:
        # The commands that make a cache too (sample, sidecar): they would write epochfs's schema
        # into another program's database and fill the folder beside it.
        raise ConfigError(f"{where}: not an epochfs cache ({why}); give another --cache")
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            return  # writable but full: each command meets that itself (status reports it)
        why = _os_reason(e)
        if unwritable_hint:
            why += f" (SQLite writes beside the index even to read it); {unwritable_hint}"
        raise ConfigError(f"{where}: cannot write in it: {why}") from None
    if writes and (entry := unwritable_entry(path)) is not None:
        raise ConfigError(unwritable_refusal(path, entry))


def check_view_folder(path: Path, *, create: bool, cache: Path | None = None) -> None:
    """Refuse a folder view's ``--mount`` that cannot be used with one line naming it, ``--mount
    PATH: reason`` (else ``publish`` ends in a traceback, and the sidecar restarts its publisher
    for ever, when the folder cannot be made).

    The rules are the FUSE mount point's (:func:`epochfs.fuse.mounting.check_mount_point`): a
    folder, or a missing one whose parent is a folder, where it is made. ``create`` (the sidecar's
    start check) makes it here; without it (``epochfs publish``, checked before ``--cache``) it
    is left for the publisher to make, and the parent must take a new entry instead. Either way
    the place is tried with a temporary file, so a path under ``/proc``, on a read-only file
    system or where permission is denied is refused here, not by the publisher. A full volume
    passes: the publisher pauses until there is room (docs/folderview.md). A folder that is not
    empty must be one the publisher wrote (:func:`published_folder`), as the FUSE view refuses
    one that is not empty: what else is there is the user's, never the view's to publish over.

    ``cache``: checked first, in the FUSE view's words (:func:`.store.placement.over_cache`):
    a ``--mount`` that is the cache folder or holds it (else refused as "not empty" once the cache
    is made in it, a puzzle for the user)."""
    where = f"--mount {path}"
    refused = None if cache is None else over_cache(Path(os.path.abspath(path)), Path(os.path.abspath(cache)))
    if refused is not None:
        raise ConfigError(refused)
    st = _stat_or_none(path, where)
    if st is None:
        _refuse_dangling(path, where)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{where}: exists and is not a folder")
    if st is not None and not published_folder(path, where):
        # The FUSE view refuses a folder that is not empty too; here it matters more: recovery
        # removes the epoch folders the store does not hold, and the user's epoch-N/ look alike.
        raise ConfigError(f"{where}: not empty, and not a folder the folder view published (no "
                          f"{CONTROL_DIR}/ in it): pass an empty folder or a missing one (made at start)")
    target = path
    if st is None:
        parent = Path(os.path.abspath(path)).parent
        if not parent.is_dir():
            nearest = _nearest_existing(Path(os.path.abspath(path)))
            if nearest is not None and not nearest.is_dir():
                raise ConfigError(f"{where}: cannot create it: {nearest} is not a folder")
            raise ConfigError(f"{where}: cannot create it: its parent {parent} does not exist")
        if create:
            try:
                path.mkdir()
                os.chmod(path, 0o755)  # the trainer's user crosses it whatever the umask (077: 0700)
            except FileExistsError:
                pass  # made by a concurrent start
            except OSError as e:
                if e.errno in (errno.ENOSPC, errno.EDQUOT):
                    return  # the publisher makes it once there is room
                raise ConfigError(f"{where}: cannot create it in {parent}: {_os_reason(e)}") from None
        else:
            target = parent
    try:
        with tempfile.TemporaryFile(dir=target):
            pass
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            return
        if target != path:
            raise ConfigError(f"{where}: cannot create it in {target}: {_os_reason(e)}") from None
        raise ConfigError(f"{where}: cannot write in it: {_os_reason(e)}") from None


def published_folder(path: Path, where: str) -> bool:
    """Whether the folder view may write into the folder ``path``: it is empty, or it holds the
    ``.epochfs/`` folder the publisher makes before it writes anything else (a restart recovers
    what it published before). ``where``: the flag, for the one line when it cannot be read."""
    try:
        with os.scandir(path) as entries:
            names = [e.name for e in entries]
    except OSError as e:
        raise ConfigError(f"{where}: cannot read it: {_os_reason(e)}") from None
    if not names:
        return True
    try:
        return stat.S_ISDIR(os.lstat(path / CONTROL_DIR).st_mode)
    except OSError:
        return False


PUBLISHED_SCAN = 256
"""Entries of an ``epoch-N/`` :func:`published_epoch` looks at: enough to meet a user's files in a
folder laid out by hand (at its top, or a few folders down), few enough that a million-entry
epoch costs next to nothing to check."""


def published_epoch(folder: Path, n: int) -> bool:
    """Whether ``folder/epoch-N`` is one the folder view published, so that it may be removed:
    a real folder (not a link, not a file) whose manifest is in ``.epochfs/`` (written before the
    epoch appears, removed after it is gone) and whose first :data:`PUBLISHED_SCAN` entries are
    folders and symlinks only (the publisher writes nothing else; a lost sample's placeholder is
    a symlink too). A user's ``epoch-3/model.pt`` fails both; an unreadable folder is not ours."""
    epoch = folder / epoch_name(n)
    try:
        if not stat.S_ISREG(os.lstat(folder / CONTROL_DIR / manifest_name(n)).st_mode):
            return False
        if not stat.S_ISDIR(os.lstat(epoch).st_mode):
            return False
        todo, seen = [epoch], 0
        while todo and seen < PUBLISHED_SCAN:
            with os.scandir(todo.pop()) as entries:
                for entry in entries:
                    seen += 1
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(Path(entry.path))
                    elif not entry.is_symlink():
                        return False
                    if seen >= PUBLISHED_SCAN:
                        break
    except OSError:
        return False
    return True


__all__ = ["CACHE_HINT", "PUBLISHED_SCAN", "check_cache", "check_view_folder", "published_epoch",
           "published_folder", "unwritable_entry", "unwritable_refusal"]


def remote_folder_holding(remote: str, place: Path) -> str | None:
    """The folder of the ``file://`` remote ``remote`` when ``place`` is in it (its root resolved:
    a dataset root may be a link, ``current -> v3``), else None (other remotes have no folder
    here). Whatever is put there the sampler lists as samples of the dataset."""
    if not remote.lower().startswith("file://"):
        return None
    root = os.path.realpath(local_root(remote) or "/")
    return root if inside(spelled(place), root) else None


def check_apart_from_remote(remote: str, **places: Path | None) -> None:
    """A ``file://`` remote's folder holding the cache or the view (``places``: flag name ->
    path), or held by one, refused (exit 2) before anything is made there. The sampler lists the
    remote's folder, so a cache or view in it would be taken for samples of the dataset (the
    store's index and lock; every sample again under the mount, more at each relist); and a
    dataset in the cache is the cache's to empty (its ``tmp/`` is cleared at each start, files
    in ``objects/`` that the index does not know are removed as orphans), under a mount hidden."""
    for flag, place in places.items():
        if place is None:
            continue
        if (root := remote_folder_holding(remote, place)) is not None:
            where = ("give --remote a narrower folder than the whole filesystem" if root == "/"
                     else f"put it beside that folder (--{flag} {Path(root).parent / ('epochfs-' + flag)})")
            raise ConfigError(f"--{flag}: {named(place)} is inside the remote's folder {root} "
                              f"(--remote {remote}), whose files are the samples: {where}")
        if (held := remote_folder_inside(remote, place)) is not None:
            raise ConfigError(f"--remote {remote}: the dataset's folder {held} is inside --{flag} "
                              f"{named(place)}, which epochfs fills and empties: move the dataset out of it")


def remote_folder_inside(remote: str, place: Path) -> str | None:
    """The folder of the ``file://`` remote ``remote`` (resolved) when it is ``place`` or in it
    (as :func:`spelled` gives it: never a ``stat`` of a mount point), else None."""
    if not remote.lower().startswith("file://"):
        return None
    root = os.path.realpath(local_root(remote) or "/")
    return root if inside(root, spelled(place)) else None
