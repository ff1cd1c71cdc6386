"""Credentials that stop working while an S3 remote runs: read again, at a bounded rate.

A store that refuses the credentials themselves (S3's ``InvalidAccessKeyId``,
``SignatureDoesNotMatch``, ``ExpiredToken``, ``InvalidToken``; none found) says nothing about the
object asked for: it is :class:`~.base.CredentialsRefused`, which the downloader retries and the
sampler's outage breaker counts, so the keys are kept, never skipped. What mends it is new
credentials: a Secret rotated in the chart's files mode (``AWS_SHARED_CREDENTIALS_FILE``
rewritten in place), a web-identity token or a profile's keys renewed. botocore reads a shared
credentials file only as it makes a session and a client, so :class:`CredentialRereads` has the S3
remote make new ones after such a refusal (the presigned fast path then signs with what they
read), at most once every :data:`REREAD_EVERY` seconds however many downloads meet the refusal.
Keys given in the process's environment (``AWS_ACCESS_KEY_ID``) cannot change under it: those are
rotated by restarting the pod.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from epochfs.sidecar.remote.errors import failure_reason, library_kind, translate

log = logging.getLogger("epochfs.remote")

REREAD_EVERY = 5.0
"""Seconds at least between two readings of the credentials after refusals: a new botocore session
and client cost ~50 ms and a HEAD of the bucket, not to be paid by each of 32 downloads."""
SAY_EVERY = 60.0
"""Seconds at least between two WARNING lines about the refusal while it lasts (each reading is
logged at DEBUG in between): the sampler's outage breaker says it at each of its pauses as well."""


def refuses_credentials(exc: BaseException) -> bool:
    """Whether ``exc`` (or a cause under it, such as a listing's :class:`~.base.RemoteError`) is
    the store's refusal of the credentials themselves (:class:`~.base.CredentialsRefused`)."""
    failure = translate(exc, library_kind)
    return failure is not None and failure.credentials


class CredentialRereads:
    """When the S3 remote reads its credentials again: after a refusal of them, no sooner than
    ``every`` seconds after the last reading. Thread-safe (every download thread reports here).

    ``forget``: drops the remote's botocore client and returns it, so that the next use makes a
    new session and client (which read the credentials again). The client dropped is closed at the
    next reading, not at once: downloads still reading a body through it finish."""

    def __init__(self, forget: Callable[[], Any], *, every: float = REREAD_EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._forget = forget
        self._every = every
        self._clock = clock
        self._lock = threading.Lock()
        self._last: float | None = None
        self._said: float | None = None
        self._retired: Any = None
        self._refused = False
        self.generation = 0
        """How many times the credentials were read again: a refusal met under an older
        generation says nothing about the credentials of the current one."""

    def refused(self, exc: BaseException) -> bool:
        """Report a failure; when it refuses the credentials and the last reading is ``every``
        seconds old (or none was made), have them read again. True when they will be."""
        if not refuses_credentials(exc):
            return False
        now = self._clock()
        with self._lock:
            self._refused = True
            if self._last is not None and now - self._last < self._every:
                return False
            self._last = now
            self.generation += 1
            old, self._retired = self._retired, self._forget()
            say = self._said is None or now - self._said >= SAY_EVERY
            if say:
                self._said = now
        log.log(logging.WARNING if say else logging.DEBUG,
                "the store refuses the credentials (%s): reading them again (at most every %.0fs "
                "while it lasts); the keys are kept, not skipped",
                failure_reason(exc), self._every)
        if old is not None:
            with contextlib.suppress(Exception):
                old.close()
        return True

    def accepted(self) -> None:
        """A request succeeded: after refusals, say once that the credentials work again."""
        if not self._refused:
            return
        with self._lock:
            was, self._refused, self._said = self._refused, False, None
        if was:
            log.info("the store accepts the credentials again")

    @contextlib.contextmanager
    def watching(self) -> Iterator[None]:
        """Report the failure (:meth:`refused`) or the success (:meth:`accepted`) of the
        requests made in the block; the failure is raised as it was."""
        try:
            yield
        except Exception as e:
            self.refused(e)
            raise
        self.accepted()


__all__ = ["REREAD_EVERY", "SAY_EVERY", "CredentialRereads", "refuses_credentials"]
