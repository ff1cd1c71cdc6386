"""The marker that forces a full integrity check of the index at the sampler's next start.

Start-up does not run ``PRAGMA integrity_check`` over the whole index (39 s at 10M samples):
it runs a cheap check, and the full one runs in the background (:mod:`.checkup`). So whatever
finds damage between two starts -- the background check, or SQLite raising "database disk image
is malformed" to any process during normal operation -- writes this marker, and the next start
runs the full check and replaces a damaged index (:mod:`.reset`) before anything else reads it.

It is a file beside the index, ``<cache>/index.check``, not a row in it: the index is the thing
that is damaged, and a write to it may fail or land on the bad page. It holds one line, the first
reason given (later ones do not overwrite it). Writing it is best effort: a process that cannot
(a read-only mount) still raises the original error, and the sampler's background check finds
the damage on its own.

This module imports nothing of the store, so :mod:`.index` can mark from its error paths.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

log = logging.getLogger("epochfs.store")

MARKER_NAME = "index.check"


def path_of(root: Path) -> Path:
    return root / MARKER_NAME


def mark(root: Path, reason: str) -> bool:
    """Ask for a full check (and repair) at the next start, for ``reason``; True when this call
    wrote the marker (False: it was already there, or it could not be written)."""
    target = path_of(root)
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {' '.join(reason.split())}\n"
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        return False
    except OSError as e:
        log.warning("cannot mark the cache index %s for a full check (%s): %s", root, e, reason)
        return False
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    except OSError:
        pass  # the file exists: that alone forces the check
    finally:
        os.close(fd)
    log.warning("SQLite found damage in the cache index in %s (%s): marked for a full check and "
              "repair at the sampler's next start", root, reason)
    return True


def reason(root: Path) -> str | None:
    """Why a full check was asked for (None: it was not)."""
    try:
        text = path_of(root).read_text(errors="replace").strip()
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"marker unreadable: {e}"
    return text or "marked"


def clear(root: Path) -> None:
    """Forget the request (after a full check passed, or after the index was replaced)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path_of(root))
