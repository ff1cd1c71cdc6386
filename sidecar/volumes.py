"""The volume checks every command runs before it opens a path a flag names: ``--cache`` and the
folder view's ``--mount``, refused in one line naming the flag (never a traceback from a bad
path), apart from the settings' declarations in :mod:`.config`, which only parse values."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from epochfs.sidecar.config import ConfigError
from epochfs.sidecar.store import INDEX_NAME

CACHE_HINT = "start `epochfs sample` or `epochfs sidecar` with this --cache first"


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


def check_cache(path: Path, *, create: bool) -> None:
    """Refuse a ``--cache`` that cannot be used with one line naming it, ``--cache PATH: reason``,
    before a command opens it (never a traceback from a bad path).

    ``create`` (``sample``, ``sidecar``): the folder is made when missing, as the store would make
    it, so a path that cannot be made (under ``/proc``, below a file, on a read-only file system,
    permission denied) is refused here. Without it (``mount``, ``publish``, ``cut``, ``relist``,
    ``verify``, ``status``) an epochfs cache must be there already: a missing folder, or one
    without the index, is refused naming the commands that make one. Either way the folder must
    take a new file: SQLite writes beside its index even to read it (WAL)."""
    where = f"--cache {path}"
    st = _stat_or_none(path, where)
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
    elif not create and not os.path.lexists(path / INDEX_NAME):
        raise ConfigError(f"{where}: no epochfs cache there (no {INDEX_NAME}); {CACHE_HINT}")
    try:
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            return  # writable but full: each command meets that itself (status reports it)
        raise ConfigError(f"{where}: cannot write in it: {_os_reason(e)}") from None


def check_view_folder(path: Path, *, create: bool) -> None:
    """Refuse a folder view's ``--mount`` that cannot be used with one line naming it, ``--mount
    PATH: reason`` (else ``publish`` ends in a traceback, and the sidecar restarts its publisher
    for ever, when the folder cannot be made).

    The rules are the FUSE mount point's (:func:`epochfs.fuse.mounting.check_mount_point`): a
    folder, or a missing one whose parent is a folder, where it is made. ``create`` (the sidecar's
    start check) makes it here; without it (``epochfs publish``, checked before ``--cache``) it
    is left for the publisher to make, and the parent must take a new entry instead. Either way
    the place is tried with a temporary file, so a path under ``/proc``, on a read-only file
    system or where permission is denied is refused here, not by the publisher. A full volume
    passes: the publisher pauses until there is room (docs/folderview.md)."""
    where = f"--mount {path}"
    st = _stat_or_none(path, where)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{where}: exists and is not a folder")
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
                path.mkdir(mode=0o755)
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

__all__ = ["CACHE_HINT", "check_cache", "check_view_folder"]
