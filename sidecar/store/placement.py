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


def spelled(path: Path) -> str:
    """``path`` as the mount table spells it: its parent's symlinks resolved, the path itself not
    touched (it may be a dead mount that answers every stat with ENOTCONN)."""
    absolute = os.path.normpath(os.path.abspath(path))
    parent, name = os.path.split(absolute)
    return os.path.join(os.path.realpath(parent), name) if name else absolute


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
        return (f"--mount: {mount} is inside the cache folder {store} (--cache), which the store "
                f"writes: mount the view beside the cache (--mount {Path(store).parent / 'view'})")
    if not inside(store, here):
        return None
    what = "is the cache folder" if here == store else f"holds the cache folder {store}"
    return (f"--mount: {mount} {what} (--cache): mount the view beside the cache, never over it "
            f"(--mount {Path(store).parent / 'view'})")


__all__ = ["inside", "over_cache", "spelled"]
