"""The fan-out folders of ``objects/`` and the one way an object file enters or leaves one.

Another process with write access to the cache volume (a same-uid neighbour, a loosely permissioned
hostPath) can plant a symbolic link where the store expects its own files. Nothing here follows
one out of ``objects/``:

* a fan-out folder (``objects/<ab>``) is opened ``O_DIRECTORY|O_NOFOLLOW`` and every rename into
  it and unlink from it goes through that descriptor (``dst_dir_fd``, ``dir_fd``): a link planted
  after the open is never crossed. A link, or any other non-folder, found at a fan-out folder's
  name is removed (the link, never what it names) and a real folder made in its place, with a
  warning (:func:`open_fan`); an unlink finds nothing of the store's behind one;
* a download's temp file is installed only when it is the very file its download wrote and
  hashed: opened ``O_NOFOLLOW``, a regular file with the device and inode the downloader recorded
  while its descriptor was open (:attr:`.records.Admission.inode`); its mode is set through that
  descriptor (``fchmod``: a link is never chmodded), and after the rename the installed name is
  checked again (:func:`install`). Anything else raises :class:`Swapped`: the download is dropped,
  never installed.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("epochfs.store")

FOLDER_MODE = 0o755
"""The mode of the folders a reader's path to an object file crosses (the cache folder,
``objects/``, ``objects/<ab>/``): the view's links resolve with the reader's own credentials,
and a non-root trainer must traverse them to reach the 0444 files. Set by chmod, not by mkdir's
mode, which the process umask masks (077 left every sample EACCES to such a reader)."""

FAN_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
TEMP_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
"""A temp file opened to be checked and chmodded: a link there fails (ELOOP); ``O_NONBLOCK`` so
that a FIFO planted there does not hang the open."""

FAN_NAME = re.compile(r"[0-9a-f]{2}")
"""The name of a fan-out folder: the first byte of a sample id, in hex."""


class Swapped(Exception):
    """A download's temp file is not the file its download wrote (replaced by another file or a
    link, or gone), or its fan-out folder is a link planted again as soon as it was replaced:
    nothing was installed (the download is dropped, its key fetched again in its turn)."""


def _not_a_folder(err: OSError) -> bool:
    """Whether an ``O_DIRECTORY|O_NOFOLLOW`` open failed on a link or another non-folder."""
    return err.errno in (errno.ELOOP, errno.ENOTDIR)


def _what(path: str) -> str:
    try:
        return f"a symbolic link to {os.readlink(path)}"
    except OSError:
        return "not a folder"


def replace_with_folder(path: str) -> None:
    """Remove the link (or other non-folder) at the fan-out folder ``path``, never following it,
    and say so; the caller makes the folder."""
    what = _what(path)
    # Gone, or a folder already (the object scan's own replacement, made meanwhile): either way
    # the caller's open of the folder follows.
    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
        os.unlink(path)
    log.warning("%s is %s, not a folder of the cache: removed (not what it names) and a folder made "
                "in its place; objects are never written or removed through a link (planted on the "
                "cache volume by another process?)", path, what)


def open_fan(objects: str, fan: str) -> int:
    """A descriptor of the fan-out folder ``objects/<fan>``, made (:data:`FOLDER_MODE`, whatever
    the umask) when missing and given the readers' bits it lacks; a link or non-folder there is
    replaced (:func:`replace_with_folder`). One planted again between the mkdir and the open
    raises (ELOOP): refused, never crossed."""
    path = f"{objects}/{fan}"
    try:
        fd = os.open(path, FAN_FLAGS)
    except FileNotFoundError:
        fd = -1
    except OSError as e:
        if not _not_a_folder(e):
            raise
        replace_with_folder(path)
        fd = -1
    if fd < 0:
        with contextlib.suppress(FileExistsError):  # made by another process meanwhile
            os.mkdir(path, FOLDER_MODE)
        try:
            fd = os.open(path, FAN_FLAGS)
        except OSError as e:
            if not _not_a_folder(e) and e.errno != errno.ENOENT:
                raise
            raise Swapped(f"{path} was replaced again ({_what(path)}) as soon as it was made a "
                          "folder") from None
    try:
        # The supervisor's served counter makes the 256 fan-out folders ahead, under its umask
        # (sidecar/served.py): readers need their bits all the same. Never taken away; one that is
        # not ours (EPERM) is left as it is.
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode & FOLDER_MODE != FOLDER_MODE:
            with contextlib.suppress(OSError):
                os.fchmod(fd, mode | FOLDER_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def install(temp: Path, inode: tuple[int, int] | None, fan_fd: int, name: str) -> None:
    """Rename the download ``temp`` to ``name`` in the fan-out folder ``fan_fd``, read-only (0444),
    when it is the file the download wrote: a regular file, not a link, with the (device, inode)
    ``inode`` (None: any regular file, for an admission made without a download). Raises
    :class:`Swapped` otherwise, and when the name was replaced between the check and the rename
    (what was renamed in is removed again)."""
    changed = "its temp file changed after its download was verified:"
    try:
        fd = os.open(temp, TEMP_FLAGS)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Swapped(f"{changed} {temp} is a symbolic link") from None
        if e.errno == errno.ENOENT:
            raise Swapped(f"{changed} {temp} is gone") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Swapped(f"{changed} {temp} is not a regular file (mode {st.st_mode:o})")
        if inode is not None and (st.st_dev, st.st_ino) != inode:
            raise Swapped(f"{changed} {temp} is another file (device {st.st_dev}, inode {st.st_ino}; the "
                          f"download wrote device {inode[0]}, inode {inode[1]})")
        os.fchmod(fd, 0o444)
    finally:
        os.close(fd)
    os.replace(temp, name, dst_dir_fd=fan_fd)
    try:
        now = os.lstat(name, dir_fd=fan_fd)
    except FileNotFoundError:
        raise Swapped(f"{changed} {temp} was removed from the cache as soon as it was renamed") from None
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=fan_fd)
        raise Swapped(f"{changed} {temp} was replaced between its check and its rename")


def unlink(objects: str, fan: str, name: str) -> bool:
    """Remove the object file ``objects/<fan>/<name>`` without crossing a link; False when it was
    not there (nor a folder of the store's: a link or non-folder at ``fan`` holds nothing of it)."""
    try:
        fd = os.open(f"{objects}/{fan}", FAN_FLAGS)
    except FileNotFoundError:
        return False
    except OSError as e:
        if _not_a_folder(e):
            return False
        raise
    try:
        os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        return False
    finally:
        os.close(fd)
    return True


def planted(objects: str, pace: Callable[[], bool]) -> tuple[list[str], list[str]]:
    """Find and remove what another process planted in ``objects/``: fan-out folders that are links
    or other non-folders (replaced by real folders) and object files that are links (removed, never
    followed; their samples' objects are then missing, and repaired in place). Returns the paths
    of each, for the object scan's report. A listing, no ``stat`` (the entries' types); ``pace``
    is called for each name and ends the pass when it says False."""
    fans: list[str] = []
    links: list[str] = []
    with os.scandir(objects) as entries:
        found = [e for e in entries if FAN_NAME.fullmatch(e.name)]
    for entry in found:
        if not pace():
            break
        if not entry.is_dir(follow_symlinks=False):
            fans.append(f"{entry.path} ({_what(entry.path)})")
            os.close(open_fan(objects, entry.name))
            continue
        try:
            fd = os.open(entry.path, FAN_FLAGS)
        except OSError as e:  # replaced since the listing: the next scan finds it
            if _not_a_folder(e) or e.errno == errno.ENOENT:
                continue
            raise
        try:
            found_links: list[str] = []
            with os.scandir(fd) as names:
                for n in names:
                    if not pace():
                        break
                    if n.is_symlink():
                        found_links.append(n.name)
            for name in found_links:
                links.append(f"{entry.path}/{name} ({_what(f'{entry.path}/{name}')})")
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=fd)
        finally:
            os.close(fd)
    return fans, links


__all__ = ["FAN_NAME", "FOLDER_MODE", "Swapped", "install", "open_fan", "planted", "replace_with_folder",
           "unlink"]
