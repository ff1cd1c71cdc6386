"""Publishing into a folder with the mount's layout, atomically: the one home of the steps.

Two writers publish epochs into a plain folder: the sidecar's folder view (``--view folder``,
``sidecar/folderview_publisher.py``) and :mod:`.plainfolder` (tests, the examples and the loader
benchmark, without a sidecar). Both follow the same rule, that **a reader never sees half of
anything**, with the same steps, kept here once:

* a small file (a manifest, ``status.json``, ``classes.json``) is written under a temporary name in
  its own folder, fsynced when asked, and renamed over the old one (:func:`replace_file`);
* ``latest`` is a symlink made under a temporary name and renamed over the old one, never over a
  user's file or folder of that name (:func:`replace_symlink`);
* an epoch's tree is built whole under a dot-prefixed temporary name (readers and
  ``layout.list_epochs`` skip it), every folder fsynced (:func:`write_tree`), then one ``rename``
  makes ``epoch-N/`` appear, and its parent folder is fsynced (:func:`show`, :func:`publish_tree`);
* a retired epoch is renamed away first, so ``epoch-N/`` is either complete or absent, and only
  then removed (:func:`retire_tree`, :func:`remove_tree`).

A ``kill -9`` at any moment leaves the old state or the new one whole, plus temporary names
(:data:`TEMP_PREFIX` in the folder, :data:`CONTROL_TEMP_PREFIX` in ``.epochfs/``) that the folder
view's recovery removes.

**Why in the torch client.** The torch client installs without the sidecar and imports nothing from
it, while the sidecar may import the client's torch-free modules (as it does the layout), so the
shared steps live here. Standard library only, like :mod:`.layout`: importing this module must not
import torch (the contract ``layout-without-torch`` in ``.importlinter`` checks).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
from collections.abc import Container, Iterable, Mapping
from pathlib import Path

TEMP_PREFIX = ".epochfs-"
"""Temporary names in the folder (builds, retirements, ``latest``): dot-prefixed, never an epoch name."""
CONTROL_TEMP_PREFIX = ".tmp-"
"""Temporary names inside ``.epochfs/`` (manifests and ``status.json`` being written)."""
RETIRED_TAG = "retired-"
"""After :data:`TEMP_PREFIX`: an epoch renamed away, being removed."""
DIR_MODE = 0o555
"""The folders of a published epoch, as the FUSE view shows them (read-only)."""
FILE_MODE = 0o444
"""The control files (manifests, ``status.json``, ``classes.json``), as the FUSE view shows them."""


def temp_path(parent: Path, prefix: str, what: str) -> Path:
    """A fresh temporary name in ``parent``: the pid and a random tag, so two writers never clash."""
    return parent / f"{prefix}{what}-{os.getpid()}-{secrets.token_hex(4)}"


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """Make the names in folder ``path`` durable (a rename is durable once its folder is fsynced)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: str | os.PathLike[str]) -> None:
    """Make the bytes of file ``path`` durable (one renamed into place without an fsync first)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(target: Path, data: bytes | Iterable[bytes], *, fsync: bool,
                 mode: int | None = None, temp_prefix: str = CONTROL_TEMP_PREFIX) -> None:
    """Replace ``target`` by temp + rename: a reader sees the old file or the new one, whole.

    ``data``: the bytes, or chunks of them (a manifest's pages, written as they are: no join of
    the whole); ``fsync``: the bytes are durable before the rename; ``mode``: set on the temp
    before it is renamed (None: the process's default). On any failure (a full volume) the temp is
    removed and the old file stays."""
    temp = temp_path(target.parent, temp_prefix, target.name)
    try:
        with open(temp, "wb") as f:
            if isinstance(data, bytes):
                f.write(data)
            else:
                f.writelines(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        if mode is not None:
            os.chmod(temp, mode)
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


class NotASymlink(FileExistsError):
    """``latest`` (or another name the publisher keeps as a symlink) holds a user's file or folder:
    what epochfs did not write it never replaces nor removes."""


def replace_symlink(path: Path, target: str | None, *, temp_prefix: str = TEMP_PREFIX) -> None:
    """Point symlink ``path`` at ``target`` by temp + rename (a reader never finds it missing);
    ``target`` None removes it. Only a missing name or a symlink is replaced: a file or folder of
    that name (a user's ``latest``) raises :class:`NotASymlink` and stays as it is."""
    if os.path.lexists(path) and not os.path.islink(path):
        raise NotASymlink(errno.EEXIST, "exists and is not a symlink epochfs made", str(path))
    if target is None:
        path.unlink(missing_ok=True)
        return
    temp = temp_path(path.parent, temp_prefix, path.name)
    os.symlink(target, temp)
    try:
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def link_target(path: Path) -> str | None:
    """Where symlink ``path`` points now; None when no symlink is there."""
    try:
        return os.readlink(path)
    except OSError:
        return None


def move_symlink(path: Path, target: str | None, *, off: Container[str]) -> OSError | None:
    """:func:`replace_symlink` on a volume that may be full: with no room for the new link
    (``ENOSPC``, ``EDQUOT``) the error is returned and the old link stays, unless it points at a
    name in ``off`` (one being removed): then it goes (an unlink needs no room). So the link never
    points at what is removed, and the caller goes on freeing room. Other errors raise."""
    try:
        replace_symlink(path, target)
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        if link_target(path) in off:
            path.unlink(missing_ok=True)
        return e
    return None


def write_tree(root: Path, dirs: Iterable[str], links: Mapping[str, str], mode: int) -> None:
    """Make folder ``root`` hold ``links`` (relative path -> symlink target) in the folders
    ``dirs`` (relative paths, ``""`` the root itself); every folder fsynced, then made ``mode``.

    ``root`` is a temporary name: nothing here is visible until :func:`show`. Links are made
    folder by folder through one descriptor of the folder (``symlinkat``): no path object and no
    path walk per entry, which halves the time of a 100k-entry epoch. Folders are made and opened
    relative to ``root``'s descriptor: a key may be 4,096 bytes, and ``root``'s path before it would
    pass the kernel's limit on one path (PATH_MAX)."""
    os.mkdir(root, 0o755)
    folders = {rel for rel in dirs if rel}
    by_folder: dict[str, list[tuple[str, str]]] = {rel: [] for rel in folders | {""}}
    for rel, target in links.items():
        parent, _, name = rel.rpartition("/")
        by_folder[parent].append((name, target))
    tree = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for rel in sorted(folders):  # parents sort before their children
            os.mkdir(rel, 0o755, dir_fd=tree)
        for rel, entries in by_folder.items():
            fd = os.open(rel or ".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=tree)
            try:
                for name, target in entries:
                    os.symlink(target, name, dir_fd=fd)
                os.fsync(fd)
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
    finally:
        os.close(tree)


def folders_of(paths: Iterable[str]) -> set[str]:
    """The folders that relative ``paths`` need, their parents included, and ``""`` (the root)."""
    found = {""}
    for path in paths:
        parent = path.rpartition("/")[0]
        while parent and parent not in found:
            found.add(parent)
            parent = parent.rpartition("/")[0]
    return found


def show(temp: Path, visible: Path) -> None:
    """One rename makes the tree built under ``temp`` appear whole as ``visible``; then the parent
    folder is fsynced (durability only: a reader sees the whole tree already)."""
    os.rename(temp, visible)
    fsync_dir(visible.parent)


def publish_tree(visible: Path, dirs: Iterable[str], links: Mapping[str, str], mode: int) -> None:
    """Make ``visible`` (``folder/epoch-N``) appear whole: built by :func:`write_tree` under a
    temporary name beside it, then :func:`show`. On any failure the temporary tree is removed and
    ``visible`` does not exist. The caller writes the epoch's manifest first."""
    temp = temp_path(visible.parent, TEMP_PREFIX, visible.name)
    try:
        write_tree(temp, dirs, links, mode)
        os.rename(temp, visible)
    except BaseException:
        remove_tree(temp)
        raise
    fsync_dir(visible.parent)


def retire_tree(visible: Path) -> Path | None:
    """``visible`` disappears at once: renamed away to a temporary name, its folder fsynced.
    Returns that name, for :func:`remove_tree` (now, or on a thread); None when it was not there."""
    if not (visible.exists() or visible.is_symlink()):
        return None
    gone = temp_path(visible.parent, TEMP_PREFIX, RETIRED_TAG + visible.name)
    os.rename(visible, gone)
    fsync_dir(visible.parent)
    return gone


def remove_tree(path: Path) -> None:
    """Remove a published tree (its folders are ``0555``, as the FUSE view shows them: opened up
    first, which only root could skip); nothing if it is gone."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
        return
    with contextlib.suppress(FileNotFoundError):
        top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            _open_up(top)
        finally:
            os.close(top)
        shutil.rmtree(path)  # through descriptors too (shutil's fd-based walk, on Linux)


def _open_up(fd: int) -> None:
    """Folder ``fd`` and every folder below it made ``0755``, walked through descriptors: an entry's
    path may pass the kernel's limit on one path (a key of 4,096 bytes below the view's folder)."""
    os.fchmod(fd, 0o755)
    for entry in os.scandir(fd):
        if entry.is_dir(follow_symlinks=False):
            sub = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            try:
                _open_up(sub)
            finally:
                os.close(sub)


__all__ = ["CONTROL_TEMP_PREFIX", "DIR_MODE", "FILE_MODE", "RETIRED_TAG", "TEMP_PREFIX", "NotASymlink",
           "folders_of", "fsync_dir", "fsync_file", "link_target", "move_symlink", "publish_tree",
           "remove_tree", "replace_file", "replace_symlink", "retire_tree", "show", "temp_path", "write_tree"]
