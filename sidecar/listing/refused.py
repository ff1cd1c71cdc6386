"""Spans whose listing the remote refuses for good: passed over, so the rest of the listing goes on.

A bucket policy that denies ``ListObjectsV2`` under one prefix, a folder deleted or made
unreadable while it was listed: every page of that span is refused the same way (the remote's
typed :class:`~epochfs.sidecar.remote.Denied` or :class:`~epochfs.sidecar.remote.NotFound`).
Raised, such a refusal would end every listing run, each resumed with the same span unreached:
the pace holds every epoch at the skew's floor (3 samples) while a span is unreached
(:func:`~epochfs.sidecar.sampler.pace.walk_cap`), and each resumed run begins the first round's
wait anew, so the sampler would fetch 3 samples for as long as it ran. So in the first listing of
a cache the span is given up: its part is committed done with no keys (a WARNING names the prefix
and the refusal once), it counts as reached, and its keys are not sampled. A relist
(``--relist-interval``, ``epochfs relist``) asks for it again; there a refusal fails the run,
which is tried again, and the catalog keeps what the listing before it had of the span (a relist's
end drops the rows it did not see, and the pace does not hold the walk during a relist).

Throttling and the remote's outages (5xx, resets, timeouts) are never refusals: they end the run
and the listing thread tries again (:mod:`.background`). Nor is a refusal of the credentials
themselves (S3's ``InvalidAccessKeyId``, Azure's ``AuthenticationFailed``, GCS's 401...:
:class:`~epochfs.sidecar.remote.base.CredentialsRefused`, the remote's as a whole, which the S3
and GCS remotes answer by reading their credentials again), nor a refusal of most of the listing
(:data:`MOST`): credentials a store answers with a plain 403 (known to it, without the right to
list) or a bucket that is gone refuse every span, and giving them all up would end the listing
with nothing listed; the run fails and is tried again instead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

from epochfs.sidecar.listing.paged import PagedSource
from epochfs.sidecar.listing.sources import SerialSource, Source
from epochfs.sidecar.listing.span import Page, Span
from epochfs.sidecar.remote import PassOver
from epochfs.sidecar.remote.errors import (
    Denied,
    NotFound,
    RemoteFailure,
    failure_reason,
    library_kind,
    translate,
)
from epochfs.sidecar.store.listings import Part

log = logging.getLogger("epochfs.catalog")

MOST = 0.5
"""The share of a listing's spans refused beyond which a refusal is no longer taken for one span's
(a policy on a prefix) but for the whole remote's (credentials, the bucket): it is raised."""


def refusal(exc: BaseException) -> RemoteFailure | None:
    """The typed refusal ``exc`` stands for (denied, not found), or None for any other failure
    (throttled, unavailable, credentials refused, transient, one no rule knows): those are
    tried again."""
    failure = translate(exc, library_kind)
    return failure if isinstance(failure, (Denied, NotFound)) else None


def read_page(source: Source, part: Part, size: int, streams: dict[int, Iterator[Page]], *,
              pass_over: PassOver | None = None) -> Page:
    """The next page of ``part``: a paged source's page of ``size`` keys after its resume point,
    or the next page of a serial source's stream of it (``streams``, opened here); a stream at
    its end is a last, empty page. ``pass_over``: asked by a walk of folders about one it may
    not read (:meth:`.SerialSource.pages`)."""
    span = Span(part.prefix, part.start, part.stop)
    if isinstance(source, PagedSource):
        return source.read_page(span, part.after, size)
    if part.part not in streams:
        streams[part.part] = (source.pages(span, part.after, pass_over=pass_over)
                              if isinstance(source, SerialSource) else source.pages(span, part.after))
    page = next(streams[part.part], None)
    return Page([], part.after, True) if page is None else page


class Refusals:
    """The spans given up in the running listing (its generation): counted for status (the
    progress record's ``spans_refused``) and bounded by :data:`MOST`. Thread-safe.

    A serial source's stream is one span: refused, it is the whole listing's refusal (the
    bounds of :data:`MOST`), tried again; but a folder its walk may not read (a ``file://``
    volume's ``lost+found`` to a sidecar that does not run as root) is passed over as a refused
    span is (:meth:`folder`).

    ``passes_over``: False for a sink that is a lasting record of the whole remote (an index file
    that ``epochfs index`` writes once and many nodes read): there a refusal is raised, as a
    failure, rather than leaving the span's keys out for every reader."""

    def __init__(self, *, passes_over: bool = True) -> None:
        self.passes_over = passes_over
        self._lock = threading.Lock()
        self._gen = -1
        self._parts = 0
        self._first = False
        self.refused: set[int] = set()
        """The parts given up in this generation."""
        self.folders: set[str] = set()
        """The folders a serial source's walk passed over in this generation."""

    def begin(self, gen: int, parts: int, *, first: bool) -> None:
        """A run of listing ``gen`` over ``parts`` parts (done ones included) starts: a new
        generation tries every span again. ``first``: no listing was complete before this one.
        Only the first listing passes a span over: there the pace holds the epochs while a span
        is unreached. A relist's refusal fails the run, tried again, and the catalog keeps the
        span's keys of the listing before (its end would drop the rows it did not see)."""
        with self._lock:
            if gen != self._gen:
                self._gen, self.refused, self.folders = gen, set(), set()
            self._parts, self._first = parts, first

    def read(self, source: Source, part: Part, size: int, streams: dict[int, Iterator[Page]]) -> Page:
        """:func:`read_page`, or a last, empty page when the remote refuses ``part`` for good
        (:meth:`give_up`); any other failure is raised."""
        try:
            return read_page(source, part, size, streams, pass_over=self.folder)
        except Exception as e:
            if not self.give_up(part, e):
                raise
            streams.pop(part.part, None)
            return Page([], part.after, True)

    def give_up(self, part: Part, exc: BaseException) -> bool:
        """Whether ``part`` is passed over for ``exc``: a refusal (:func:`refusal`) in the first
        listing of a paged remote, while at most :data:`MOST` of its spans are refused. Logged
        once for the part."""
        failure = refusal(exc) if self.passes_over and self._first else None
        if failure is None:
            return False
        with self._lock:
            if part.part not in self.refused and len(self.refused) + 1 > MOST * max(self._parts, 1):
                return False
            first = part.part not in self.refused
            self.refused.add(part.part)
        if first:
            where = f"{part.prefix or 'the root'!r}" + (f" from {part.start!r}" if part.start else "")
            _warn(where, failure, exc)
        return True

    def folder(self, prefix: str, exc: BaseException) -> bool:
        """Whether a serial source's walk passes over the folder ``prefix`` it may not read: a
        refusal (:func:`refusal`: EACCES is denied; EIO is not) in the first listing. Logged
        once for the folder."""
        failure = refusal(exc) if self.passes_over and self._first else None
        if failure is None:
            return False
        with self._lock:
            first = prefix not in self.folders
            self.folders.add(prefix)
        if first:
            _warn(repr(prefix), failure, exc)
        return True

    def progress(self) -> dict[str, int]:
        """The progress record's count of the spans and folders given up (nothing while there
        are none)."""
        with self._lock:
            given_up = len(self.refused) + len(self.folders)
        return {"spans_refused": given_up} if given_up else {}


def _warn(where: str, failure: RemoteFailure, exc: BaseException) -> None:
    log.warning("listing of %s refused (%s: %s): passed over, its keys are not sampled; a relist "
                "tries it again", where, type(failure).__name__, failure_reason(exc))


__all__ = ["MOST", "Refusals", "read_page", "refusal"]
