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
  copied into ``<cache>/mount-strays/<UTC time>/``, then removed (:mod:`.straycopy`: only what was
  copied is removed, a file another process still holds open stays in place for the next restart,
  and what cannot be copied then removed is refused first).

The folders made here are ``0755`` whatever the umask: the writer of a file (another user)
reaches it. The store never reads or writes these folders and the view does not show them.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

from epochfs.fuse import straycopy
from epochfs.fuse.errors import MountError
from epochfs.sidecar.store.fanout import FOLDER_MODE

log = logging.getLogger("epochfs.fuse")

STRAYS_DIR = "mount-strays"
"""Under the cache, and in ``.<name>.mount-strays`` beside the mount point: where a restart moves
what it found in the mount-point folder."""


def beside(path: Path) -> Path:
    """The strays' folder beside the mount point ``path``, on the mount point's own volume."""
    return path.parent / f".{path.name}.{STRAYS_DIR}"


def move_strays(path: Path, cache: Path) -> Path | None:
    """Move everything in the mount-point folder ``path`` into a new folder (the module's list of
    places); that folder, or None when ``path`` was empty."""
    names = sorted(os.listdir(path))
    if not names:
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    with _writable(path):
        for root in (cache / STRAYS_DIR, beside(path)):
            dest = _renamed_into(path, root, stamp, names)
            if dest is not None:
                _warn(path, names, dest, "moved aside to %s, not deleted")
                return dest
        refused = straycopy.refusal(path, names, cache)
        if refused is not None:
            raise MountError(f"--mount: {path} is not empty, no rename takes its entries elsewhere "
                             f"(the cache is on another volume and no folder can be made beside "
                             f"the mount point), and {refused}: nothing was moved")
        with _folder(cache / STRAYS_DIR, stamp) as dest:
            try:
                done = straycopy.copy_all(path, dest, names)
            except OSError as e:
                raise MountError(f"--mount: {path} is not empty and its entries could not all be "
                                 f"copied into {dest} and removed ({e}): each file is either there or "
                                 "still in place") from None
        if done.opened_at_removal:
            log.error("a process opened %s for writing as it was removed, after its copy to %s: what "
                      "it writes through that descriptor is lost", ", ".join(done.opened_at_removal[:5]),
                      dest)
        if done.moved:
            _warn(path, done.moved, dest,
                  "copied to %s (another volume, and none beside it), then removed" + _checked(done))
        if done.left:
            left = ", ".join(f"{name} ({why})" for name, why in list(done.left.items())[:5])
            raise MountError(f"--mount: {path} is not empty: {left}: left in place, copied again at the "
                             "next restart" + (f" (the others were copied to {dest}, then removed)"
                                               if done.moved else ""))
    return dest


def _checked(done: straycopy.Copied) -> str:
    """What the warning says of the writers of the files removed after their copy."""
    if done.unchecked:
        return (f"; {done.unchecked} file(s) without knowing whether a writer still held one open (no "
                "lease tells on that file system), which loses what it writes after the copy")
    if done.opened_at_removal:
        return "; one or more opened for writing as they were removed (the error above)"
    return ", none of them open for writing in another process"


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
                    moved = ("nothing was moved" if i == 0 else
                             f"{i} of {len(names)} moved to {dest}, the rest left for the next restart")
                    raise MountError(f"--mount: {path} is not empty and its entry {name!r} could "
                                     f"not be moved into {root}: {e}; {moved}") from None
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


def _warn(path: Path, names: list[str], dest: Path, how: str) -> None:
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    log.warning("the mount point %s held %d entr%s, written there while no view was mounted (%s): "
                + how, path, len(names), "y" if len(names) == 1 else "ies", shown, dest)
