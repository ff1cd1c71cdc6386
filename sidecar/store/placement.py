"""Where a view of the cache may be placed: never at the cache folder, inside it or over it.

A view (the FUSE mount or the folder view's published folder) at the cache folder, or at a folder
that holds it, would hide the store from the processes that read it, and the check of an empty
mount point would pass before the store fills it; a view inside it would hide the store's own
folders (a FUSE mount over ``tmp/`` failed every download, read-only, and the sampler crashed
at every start). Both views refuse it in the same words
(``fuse.mounting.check_mount_apart``, ``sidecar.volumes.check_view_folder``), before anything is
made; the rule lives here, beside the cache's layout, which both may import.
"""

from __future__ import annotations

import os
from pathlib import Path

LINKS_FOLLOWED = 40
"""Symlinks :func:`spelled` follows at the end of a path before it stops (the kernel's own bound):
a loop is spelled where it stops, and meets its ELOOP where it is used."""


def spelled(path: Path) -> str:
    """``path`` as the mount table spells it: its parent's symlinks resolved, and the path itself
    where it is a symlink (the kernel mounts at, the publisher writes into, the folder the link
    names: a ``--mount`` linked into the remote's folder or into the cache's ``tmp/`` must be
    refused as that folder is, and a ``--cache`` linked into the remote's folder too).

    The last part is followed with ``readlink`` only, never a ``stat``: it may be a mount point
    whose FUSE server is dead (every stat answers ENOTCONN) or frozen (a stat would hang), where
    ``readlink`` answers EINVAL without asking the server. A link to a missing folder is spelled
    as that folder (:func:`epochfs.sidecar.volumes.check_view_folder` refuses it by name)."""
    here = os.path.normpath(os.path.abspath(path))
    for _ in range(LINKS_FOLLOWED):
        parent, name = os.path.split(here)
        if name in ("", ".", ".."):  # the root, or a link ending in a folder's "." or ".."
            return os.path.realpath(here) if name else here
        here = os.path.join(os.path.realpath(parent), name)
        try:
            target = os.readlink(here)
        except OSError:  # not a link (EINVAL), or nothing there: spelled as it is
            return here
        here = os.path.join(os.path.dirname(here), target.rstrip("/") or "/")
    return here


def named(path: Path) -> str:
    """``path`` as a refusal names it: as given, and where it is a symlink the folder it names too
    (``view (a symlink to /data/view)``), else a link beside the remote's folder or the cache
    would be refused as "inside" it, a puzzle. ``readlink`` only, as in :func:`spelled`."""
    try:
        os.readlink(path)
    except OSError:
        return str(path)
    return f"{path} (a symlink to {spelled(path)})"


def inside(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or below it, both spelled as :func:`spelled` gives them."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def over_cache(mount: Path, cache: Path) -> str | None:
    """Why ``mount`` may not hold a view of ``cache`` (it is the cache folder, is inside it or holds
    it), in the words of a refusal naming ``--mount``; None where it may."""
    here, store = spelled(mount), spelled(cache)
    if here != store and inside(here, store):
        # Inside it: the store's own folders (tmp/, epochs/, objects/...) and any folder it may
        # make there; a view mounted over tmp/ made every download fail (read-only) for ever.
        return (f"--mount: {named(mount)} is inside the cache folder {store} (--cache), which the store "
                f"writes: mount the view beside the cache (--mount {Path(store).parent / 'view'})")
    if not inside(store, here):
        return None
    what = "is the cache folder" if here == store else f"holds the cache folder {store}"
    return (f"--mount: {named(mount)} {what} (--cache): mount the view beside the cache, never over it "
            f"(--mount {Path(store).parent / 'view'})")


__all__ = ["LINKS_FOLLOWED", "inside", "named", "over_cache", "spelled"]
