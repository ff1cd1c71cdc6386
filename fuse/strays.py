"""What a FUSE restart finds in the view's mount-point folder, moved aside.

While the FUSE server restarts (a crash, a kill: docs/sidecar.md, "Crashes") nothing is mounted at
the view's mount point for a second or so, and the bare folder there answers instead. A trainer
that writes there (a checkpoint retried in a loop) lands its file in that folder: hidden under the
next mount, and the restarted server refused the folder as not empty, which stopped the sidecar
for good. The supervisor therefore moves what it finds there, never deleting it (a user's data),
before it *restarts* the FUSE server (:func:`move_strays`). A first start still refuses a folder
that is not empty (``--mount`` is then likely a wrong path).

Where to: renamed, never copied, where a rename can reach. The writer may still hold its file open
(it opened it in the bare folder and writes on), and a rename keeps the file it writes to, where a
copy and a removal leave its later writes in a removed file: lost. So the entries go to the first
of these that a rename reaches:

* ``<cache>/mount-strays/<UTC time>/``: the cache's volume, where the mount point is on it too;
* ``<parent>/.<name>.mount-strays/<UTC time>/`` beside the mount point ``<parent>/<name>``, on the
  mount point's own volume (in a pod, the shared volume: the cache is on another one; the chart's
  trainer mounts it read-only, a container that mounts it writable finds its file there);
* otherwise (the mount point is itself the root of a volume, or its parent takes no new folder)
  copied into ``<cache>/mount-strays/<UTC time>/``, then removed, and the warning says that a
  writer still holding a file open loses what it writes after the copy. Each entry's copy is
  whole before its original is removed, and kept whatever that removal does; an entry whose
  removal must fail (a mount below it, an immutable or append-only file or folder) or that cannot
  be copied (a device, a pipe, a socket) is refused before anything is copied, so nothing is ever
  only in a removed original, and a restart that meets it again copies nothing again.

The folders made here are ``0755`` whatever the umask: the writer of a file (another user)
reaches it. The store never reads or writes these folders and the view does not show them.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import shutil
import stat
import struct
import time
from collections.abc import Iterator
from pathlib import Path

from epochfs.fuse import mounting
from epochfs.fuse.errors import MountError
from epochfs.sidecar.store.fanout import FOLDER_MODE

log = logging.getLogger("epochfs.fuse")

STRAYS_DIR = "mount-strays"
"""Under the cache, and in ``.<name>.mount-strays`` beside the mount point: where a restart moves
what it found in the mount-point folder."""
_FS_IOC_GETFLAGS = 0x80086601
_PINNING_FLAGS = 0x10 | 0x20
"""``FS_IMMUTABLE_FL`` and ``FS_APPEND_FL`` (``chattr +i``, ``+a``): the entry cannot be removed."""


def beside(path: Path) -> Path:
    """The strays' folder beside the mount point ``path``, on the mount point's own volume."""
    return path.parent / f".{path.name}.{STRAYS_DIR}"


def move_strays(path: Path, cache: Path) -> Path | None:
    """Move everything in the mount-point folder ``path`` into a new folder (the module's list of
    places); that folder, or None when ``path`` was empty."""
    if _empty(path):
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    with _writable(path):
        names = sorted(os.listdir(path))
        for root in (cache / STRAYS_DIR, beside(path)):
            dest = _renamed_into(path, root, stamp, names)
            if dest is not None:
                _warn(path, names, dest, "moved aside to %s, not deleted")
                return dest
        refused = _not_copyable(path, names)
        if refused is not None:
            raise MountError(f"--mount: {path} is not empty, its entries cannot be renamed aside "
                             f"(another volume), and {refused}: nothing was moved")
        with _folder(cache / STRAYS_DIR, stamp) as dest:
            try:
                _copy_all(path, dest, names)
            except OSError as e:
                raise MountError(f"--mount: {path} is not empty and its entries could not be "
                                 f"copied aside to {dest}: {e}") from None
    _warn(path, names, dest, "copied to %s (another volume, and none beside it), then removed; a "
                             "writer that still held one open loses what it writes after the copy")
    return dest


def _renamed_into(path: Path, root: Path, stamp: str, names: list[str]) -> Path | None:
    """Every entry of ``path`` renamed into a new folder under ``root``; that folder, or None
    where no rename reaches ``root`` (another volume, or no new folder there): nothing moved.

    Any other failure is a :class:`MountError`: what was renamed stays renamed, and the next
    restart moves the rest."""
    try:
        with _folder(root, stamp) as dest:
            for i, name in enumerate(names):
                try:
                    os.rename(path / name, dest / name)
                except OSError as e:
                    if i == 0 and e.errno == errno.EXDEV:
                        return None
                    raise MountError(f"--mount: {path} is not empty and its entry {name!r} could "
                                     f"not be moved aside to {dest}: {e}") from None
    except OSError:
        return None  # no folder can be made there (a MountError is no OSError: it goes on)
    return dest


@contextlib.contextmanager
def _folder(root: Path, stamp: str) -> Iterator[Path]:
    """A new folder ``root/stamp`` (``stamp.2``, ... where one of that second exists), mode
    :data:`FOLDER_MODE`; ``root`` is made too where missing (its parent must exist). Left empty by
    the block (nothing moved into it), it is removed again, and ``root`` with it when made here."""
    made_root = False
    with contextlib.suppress(FileExistsError):
        root.mkdir()
        made_root = True
        os.chmod(root, FOLDER_MODE)
    dest = root / stamp
    n = 1
    while dest.exists():
        n += 1
        dest = root / f"{stamp}.{n}"
    try:
        dest.mkdir()
        os.chmod(dest, FOLDER_MODE)
        yield dest
    finally:
        if _gone_if_empty(dest) and made_root:
            _gone_if_empty(root)


def _gone_if_empty(folder: Path) -> bool:
    """Remove ``folder`` if it is there and empty; whether it is gone."""
    try:
        folder.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


def _empty(folder: Path) -> bool:
    with os.scandir(folder) as entries:
        return not any(entries)


@contextlib.contextmanager
def _writable(folder: Path) -> Iterator[None]:
    """``folder`` with write permission for the moves, then its mode back."""
    mode = folder.stat().st_mode & 0o7777
    if not mode & 0o200:
        os.chmod(folder, mode | 0o700)
    try:
        yield
    finally:
        if not mode & 0o200:
            os.chmod(folder, mode)


def _not_copyable(folder: Path, names: list[str]) -> str | None:
    """Why the entries of ``folder`` cannot be copied then removed, or None: a mount at or below
    one (its removal would empty the other volume, then fail), a file or folder (the mount point
    folder included) that is immutable or append-only (its removal fails), an entry that is not a
    file, a folder or a symbolic link (a copy would read a device or wait on a pipe)."""
    base = mounting.canonical(folder) + "/"
    mounted = [e.mount_point for e in mounting.mount_table() if e.mount_point.startswith(base)]
    if mounted:
        return f"{mounted[0]} is a mount point"
    if _flags(str(folder)) & _PINNING_FLAGS:
        return f"{folder} is immutable or append-only"
    for name in names:
        top = folder / name
        why = _pinned(str(top))
        if why is None and top.is_dir() and not top.is_symlink():
            why = next((w for parent, dirs, files in os.walk(top) for entry in (*dirs, *files)
                        if (w := _pinned(os.path.join(parent, entry))) is not None), None)
        if why is not None:
            return why
    return None


def _pinned(path: str) -> str | None:
    """Why the entry ``path`` cannot be copied then removed, or None."""
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode):
        return None
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return f"{path} is not a file, a folder or a link"
    if _flags(path) & _PINNING_FLAGS:
        return f"{path} is immutable or append-only"
    return None


def _flags(path: str) -> int:
    """The inode flags of the file or folder ``path`` (``lsattr``), 0 where it has none to tell."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return 0
    try:
        return int(struct.unpack("l", fcntl.ioctl(fd, _FS_IOC_GETFLAGS, struct.pack("l", 0)))[0])
    except OSError:
        return 0
    finally:
        os.close(fd)


def _copy_all(folder: Path, dest: Path, names: list[str]) -> None:
    """Copy each entry of ``folder`` into ``dest``, then remove its original. A copy that failed part
    way is removed (its original is whole); once whole, a copy is kept whatever the removal of its
    original does, so that nothing is only in a removed original."""
    for name in names:
        src, dst = folder / name, dest / name
        tree = src.is_dir() and not src.is_symlink()
        try:
            if tree:
                shutil.copytree(src, dst, symlinks=True)
            else:
                shutil.copy2(src, dst, follow_symlinks=False)
        except OSError:
            if os.path.isdir(dst) and not os.path.islink(dst):
                shutil.rmtree(dst, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(dst)
            raise
        if tree:
            shutil.rmtree(src)
        else:
            os.unlink(src)


def _warn(path: Path, names: list[str], dest: Path, how: str) -> None:
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    log.warning("the mount point %s held %d entr%s, written there while no view was mounted (%s): "
                + how, path, len(names), "y" if len(names) == 1 else "ies", shown, dest)
