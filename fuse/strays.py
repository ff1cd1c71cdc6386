"""What a FUSE restart finds in the view's mount-point folder, moved aside.

While the FUSE server restarts (a crash, a kill: docs/sidecar.md, "Crashes") nothing is mounted at
the view's mount point for a second or so, and the bare folder there answers instead. A trainer
that writes there (a checkpoint retried in a loop) lands its file in that folder: hidden under the
next mount, and the restarted server refused the folder as not empty, which stopped the sidecar
for good. The supervisor therefore moves what it finds there, never deleting it (a user's data),
into ``<cache>/mount-strays/<UTC time>/`` before it *restarts* the FUSE server
(:func:`move_strays`): a folder the store never reads or writes and that the view does not show.
A first start still refuses a folder that is not empty (``--mount`` is then likely a wrong path).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from pathlib import Path

from epochfs.fuse.errors import MountError

log = logging.getLogger("epochfs.fuse")

STRAYS_DIR = "mount-strays"
"""Under the cache: where a restart moves what it found in the mount-point folder."""


def move_strays(path: Path, cache: Path) -> Path | None:
    """Move everything in the mount-point folder ``path`` into a new folder under
    ``<cache>/mount-strays/``; that folder, or None when ``path`` was empty."""
    if not any(os.scandir(path)):
        return None
    dest = cache / STRAYS_DIR / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    n = 1
    while dest.exists():
        n += 1
        dest = dest.with_name(f"{dest.name.split('.')[0]}.{n}")
    dest.mkdir(parents=True)
    try:
        names = _move_all(path, dest)
    except OSError as e:
        with contextlib.suppress(OSError):
            dest.rmdir()  # nothing moved: no empty folder per failed try
        raise MountError(f"--mount: {path} is not empty and its entries could not be moved "
                         f"aside to {dest}: {e}") from None
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    log.warning("the mount point %s held %d entr%s, written there while no view was mounted (%s): "
                "moved aside to %s, not deleted", path, len(names), "y" if len(names) == 1 else "ies",
                shown, dest)
    return dest


def _move_all(folder: Path, dest: Path) -> list[str]:
    """Move every entry of ``folder`` into ``dest`` (another file system: copied, then removed);
    their names. A folder without write permission gets it for the moves, then its mode back."""
    mode = folder.stat().st_mode & 0o7777
    if not mode & 0o200:
        os.chmod(folder, mode | 0o700)
    try:
        names = sorted(os.listdir(folder))
        for name in names:
            try:
                shutil.move(str(folder / name), str(dest / name))
            except OSError:
                # A copy whose original could not be removed (immutable, a busy folder): dropped,
                # or every restart would add one more copy of it to the cache's volume.
                if os.path.lexists(folder / name) and os.path.lexists(dest / name):
                    if os.path.isdir(dest / name) and not os.path.islink(dest / name):
                        shutil.rmtree(dest / name, ignore_errors=True)
                    else:
                        with contextlib.suppress(OSError):
                            os.unlink(dest / name)
                raise
    finally:
        if not mode & 0o200:
            os.chmod(folder, mode)
    return names
