"""What the FUSE adapters share about answering the kernel: view errors turned into errno (every
call counted), and the capabilities asked of the kernel at init.

Apart from :mod:`.operations` (the calls themselves) so that both libfuse adapters, the high-level
one there and the low-level :mod:`.lowlevel`, translate errors one way.

Import this module only after ``FUSE_LIBRARY_PATH`` is set (see :mod:`epochfs.fuse.server`):
mfusepy binds libfuse when it is imported.
"""

from __future__ import annotations

import errno
import functools
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast

import mfusepy

from epochfs.fuse.classes import RecordUnavailable
from epochfs.fuse.lost import LostSample, lost_log
from epochfs.fuse.metrics import fuse_metrics
from epochfs.fuse.view import NotADirectory, NotALink, NotFound

log = logging.getLogger("epochfs.fuse")

FuseOSError = mfusepy.FuseOSError

# libfuse 3 capability bits (fuse_common.h) and readdir flags (fuse.h).
FUSE_CAP_READDIRPLUS = 1 << 13
FUSE_CAP_READDIRPLUS_AUTO = 1 << 14
FUSE_CAP_CACHE_SYMLINKS = 1 << 23
FUSE_READDIR_PLUS = 1 << 0
FUSE_FILL_DIR_PLUS = 1 << 1

F = TypeVar("F", bound=Callable[..., Any])


def wanted_capabilities(capable: int, want: int) -> int:
    """The capability bits to ask of the kernel: symlink targets cached, readdir-plus always.

    Always readdir-plus, not "auto": auto sends attributes only with the first chunk of a listing,
    and every later file then costs a lookup before its readlink."""
    wish = FUSE_CAP_CACHE_SYMLINKS | FUSE_CAP_READDIRPLUS
    if wish & ~capable & FUSE_CAP_CACHE_SYMLINKS:
        log.warning("kernel cannot cache symlink targets: every open costs a readlink")
    return (want | (wish & capable)) & ~FUSE_CAP_READDIRPLUS_AUTO


UNAVAILABLE_REPEAT = 60.0
"""Seconds between two log lines of classes.json requests that got no record."""
_unavailable_said = [-UNAVAILABLE_REPEAT]


def translate_errors(method: F) -> F:
    """Map view errors to errno; anything unexpected becomes EIO (and is logged with its cause).
    Every call is counted by operation, and every error by operation and errno."""
    op = {"listing": "readdir"}.get(method.__name__, method.__name__)

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            result = translated(*args, **kwargs)
        except FuseOSError as e:
            fuse_metrics().request(op, e.errno)
            raise
        fuse_metrics().request(op)
        return result

    @functools.wraps(method)
    def translated(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except FuseOSError:
            raise
        except NotFound as e:
            raise FuseOSError(errno.ENOENT) from e
        except NotADirectory as e:
            raise FuseOSError(errno.ENOTDIR) from e
        except NotALink as e:
            raise FuseOSError(errno.EINVAL) from e
        except LostSample as e:  # the remote lost its sample: the entry stays, a read is an I/O error
            lost_log.report(e, op)
            raise FuseOSError(errno.EIO) from e
        except RecordUnavailable as e:  # classes.json's record: its reason in one line, now and then
            now = time.monotonic()
            if now - _unavailable_said[0] >= UNAVAILABLE_REPEAT:
                _unavailable_said[0] = now
                log.warning("%s (EIO; such lines at most once a minute)", e)
            raise FuseOSError(errno.EIO) from e
        except Exception as e:
            log.exception("unexpected error in %s%r", method.__name__, args[1:])
            raise FuseOSError(errno.EIO) from e

    return cast(F, wrapper)
