"""Riding out a restart of the mount: bounded retries of reads of files the epoch lists.

When the sidecar's FUSE server dies, the supervisor detaches its mount and mounts a new server (a
second or two, more when the server restarts in a loop). Meanwhile a path inside ``epoch-N/`` answers
ENOTCONN (the dead mount) or ENOENT (the empty mount point), although the file is listed and will be
back. So a read of a listed file that fails with one of :data:`TRANSIENT_ERRNOS` is tried again, with
backoff (20 ms doubling to 0.5 s), for up to ``retry_seconds`` (default :data:`RETRY_SECONDS`); each
incident is one WARNING line on the ``epochfs.torchclient`` logger, when the read succeeds or when it
gives up. Other errors (a corrupt file, EACCES, EIO) are raised at once.

A file that stays missing (an epoch retired while no reader held it, a walked file deleted) fails
after the bound; for the next bound this process then fails such reads at once (unless a read
succeeds meanwhile), so a lost epoch costs one bound per process, not one per file.

Standard library only (workers import it with the decoders).
"""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger("epochfs.torchclient")

RETRY_SECONDS = 30.0
"""Default bound on retrying one read: covers a FUSE server restart (about 1-3 s, up to ~10 s when
the supervisor replaces a hung server) with room to spare."""

TRANSIENT_ERRNOS = frozenset({errno.ENOENT, errno.ENOTCONN, errno.ECONNABORTED, errno.ESTALE})
"""What a path on a mount that is being replaced answers."""

T = TypeVar("T")


def check_retry_seconds(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 \
            or value == float("inf"):
        raise ValueError("retry_seconds must be a finite number of seconds >= 0 (0: no retry), "
                         f"got {value!r}")
    return float(value)


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) is an OSError a mount restart gives. The
    first OSError with an errno decides: an EIO raised from an ENOENT (a sample the remote lost,
    :mod:`.lost`) is not retried."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno is not None:
            return e.errno in TRANSIENT_ERRNOS
        e = e.__cause__ or e.__context__
    return False


class _State:
    """Per process: after a retry gave up, fail at once for one bound, or until a read succeeds."""

    given_up_at: float | None = None

    @classmethod
    def fast_fail(cls, seconds: float) -> bool:
        return cls.given_up_at is not None and time.monotonic() - cls.given_up_at < seconds


def retrying(what: str, call: Callable[[], T], *, seconds: float) -> T:
    """``call()``, tried again on a transient error for up to ``seconds``; one log line per incident."""
    start = time.monotonic()
    delay = 0.02
    retries = 0
    first: BaseException | None = None
    while True:
        try:
            result = call()
        except Exception as exc:
            if seconds <= 0 or not transient(exc) or _State.fast_fail(seconds):
                raise
            first = first or exc
            elapsed = time.monotonic() - start
            if elapsed >= seconds:
                _State.given_up_at = time.monotonic()
                log.warning("epochfs: %s: %s; still failing after %.1fs and %d retries, giving up "
                            "(retry_seconds=%g)", what, _reason(exc), elapsed, retries, seconds)
                raise
            time.sleep(min(delay, seconds - elapsed))
            delay = min(delay * 2, 0.5)
            retries += 1
            continue
        _State.given_up_at = None
        if first is not None:
            log.warning("epochfs: %s: %s; read after %.1fs and %d retries (the mount was away: a FUSE "
                        "server restart?)", what, _reason(first), time.monotonic() - start, retries)
        return result


def _reason(exc: BaseException) -> str:
    e: BaseException | None = exc
    while e is not None:
        if isinstance(e, OSError) and e.strerror:
            return f"{e.strerror} [{errno.errorcode.get(e.errno or 0, e.errno)}]"
        e = e.__cause__ or e.__context__
    return str(exc)
