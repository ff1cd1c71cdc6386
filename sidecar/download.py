"""Fetch one object into a temp file of the store, verified, with bounded retries.

The bytes go from the remote reader to the temp file in large blocks while exactly one digest is
computed on the same blocks (awscrt's CRCs, hashlib and file writes release the GIL, so many
downloads hash in parallel; :mod:`epochfs.sidecar.tempwrite`). The temp file is fsynced before it
is handed back, so :meth:`Store.admit` only has to rename it.

A download is verified against the size in the catalog (and the Content-Length) and against the
first of these the remote offers (:mod:`epochfs.sidecar.remote.checksums`): a full-object checksum sent
with the body (S3's ``x-amz-checksum-*``, asked for on every GET), a plain md5 ETag, or a
multipart ETag re-hashed from the written file's parts. The digest computed while streaming is
the stored checksum's algorithm (a CRC: md5 is never computed when a stored checksum can vouch
for the bytes), md5 for a plain md5 ETag, else CRC64NVME; it is recorded as
``<algorithm>:<value>``, as the scrub's reference for the local copy, and as the manifest's
checksum only when something vouched for the bytes (else ``size-only``), with the kind of check
in ``verified``. A mismatch is :class:`Transient` and retried: wrong bytes are never admitted
with a checksum. What happens after a failure depends only on its kind
(:mod:`epochfs.sidecar.remote.errors`; the remotes type their failures where they arise, and
this module types its own: a size that differs from the listing is :class:`Changed`, whether
announced or found by a body that runs past it (read no further), a truncated body or a checksum
mismatch :class:`Transient`):

- not found, changed, denied (404, 403, a proxy's 407, an object whose size changed since the
  listing, a TLS certificate that does not verify), or an error no rule knows: given up at once;
- transient (truncated or garbled body, checksum mismatch, a TLS connection cut mid-body):
  retried with exponential backoff and full jitter up to ``attempts`` times in all;
- unavailable (connection refused or reset, timeout, a 5xx that is not throttling): retried the
  same way, and when given up on, marked :attr:`FetchResult.unavailable` so the sampler's outage
  breaker counts it (several in a row: the remote is down, the keys are kept);
- throttled (S3 ``SlowDown``, HTTP 429, GCS ``rateLimitExceeded``): returned at once, marked
  :attr:`FetchResult.throttled`, whatever attempt it was. It is not counted against ``attempts``
  and nothing sleeps in the download slot: the sampler keeps the key, fetches it again after a
  full-jitter delay and narrows its fetch window, which is what lowers the request rate
  (retrying in place would not: every slot would keep asking).

Either way (throttling apart) the caller skips the sample (unless the breaker keeps it) and
sampling goes on; nothing partial or unverified ever leaves this module. A failure to write the
node volume is not the remote's and is never retried as one: it raises :class:`LocalWriteError`
to the sampler.
"""

from __future__ import annotations

import logging
import mmap
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from epochfs.sidecar.metrics import process_metrics
from epochfs.sidecar.ratelimit import RateLimiter
from epochfs.sidecar.received import InFlightBytes
from epochfs.sidecar.remote import checksums
from epochfs.sidecar.remote.backoff import full_jitter, jitter_bound
from epochfs.sidecar.remote.base import BLOCK, Changed, Kind, Remote, RemoteFailure, Transient
from epochfs.sidecar.remote.checksums import plain_md5_etag
from epochfs.sidecar.remote.errors import translate
from epochfs.sidecar.store import SIZE_ONLY, Admission, Candidate, Store, digests
from epochfs.sidecar.tempwrite import (
    DIRECT_ALIGN,
    WRITE_PIECE,
    Cancelled,
    LocalWriteError,
    create_temp,
    stream_to_temp,
)

log = logging.getLogger("epochfs.download")

PRUNE_AT = 1024
"""Temps listed before the downloader first looks which are gone (see :meth:`Downloader._track`)."""

def failure_kind(exc: BaseException) -> Kind:
    """The one classifier: the kind of a failed attempt, which decides retry, skip or outage.

    Remotes raise typed failures; a standard-library error from a remote that does not type its
    own (a socket error, ``http.client``'s) is typed by the same rules. Anything else is a
    failure of this one object that another try would not mend.
    """
    failure = translate(exc)
    return type(failure) if failure is not None else RemoteFailure


def is_transient(exc: BaseException) -> bool:
    """Whether a failed attempt is worth another try (network trouble, 5xx, throttling: the
    last one by the sampler, not here)."""
    return failure_kind(exc).retry


def is_unavailable(exc: BaseException) -> bool:
    """Whether a failure says the remote as a whole is unreachable or overloaded (connection
    refused/reset, timeout, 5xx), rather than that this one object is bad."""
    return failure_kind(exc).outage


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded attempts with exponential backoff and full jitter (AWS's recommended scheme,
    :mod:`epochfs.sidecar.remote.backoff`): the pause after attempt n is drawn from
    ``[0, min(cap, base * 2**(n-1))]``."""

    attempts: int = 5
    base: float = 0.1
    cap: float = 10.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if self.base < 0 or self.cap < self.base:
            raise ValueError("need 0 <= base <= cap")

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        return full_jitter(jitter_bound(self.base, self.cap, attempt - 1), rng)


@dataclass(frozen=True)
class FetchResult:
    """The outcome of one object: an admission ready for the store, or why it was skipped."""

    candidate: Candidate
    admission: Admission | None
    error: str | None = None
    attempts: int = 0
    cancelled: bool = False
    unavailable: bool = False
    """Given up on failures that point at the remote as a whole (:class:`Unavailable`)."""
    throttled: bool = False
    """The remote asked for fewer requests (:class:`Throttled`): fetch the key again later."""
    gave_up: bool = False
    """Given up after its attempts on failures that may pass (:class:`Transient`), not on an
    answer about the object (missing, changed, denied)."""


class Downloader:
    """Fetches catalog candidates into the store's temp folder; safe to use from many threads."""

    def __init__(
        self,
        *,
        store: Store,
        remote: Remote,
        retry: RetryPolicy,
        stop: threading.Event,
        block: int = BLOCK,
        rate: RateLimiter | None = None,
        hashers: Callable[[str], checksums.Hasher] = digests.new_hasher,
        direct: bool = True,
        stall_window: float = 30.0,
    ) -> None:
        """``hashers``: the one hasher of each body by algorithm; ``direct``: write bodies past the
        page cache where it can (:mod:`.tempwrite`); ``stall_window``: --read-timeout (:mod:`.received`)."""
        if block < 4096:
            raise ValueError("block must be at least 4096 bytes")
        self.store = store
        self.remote = remote
        self.retry = retry
        self.stop = stop
        self.block = block
        self.rate = rate
        self.hashers = hashers
        self.direct = direct
        self.stall_window = stall_window
        self._lock = threading.Lock()
        self._temps: set[Path] = set()
        self._fresh: set[Path] = set()
        """Temps listed since the last look began: not looked at until the next one (see
        :meth:`_prune`)."""
        self._prune_at = PRUNE_AT
        self._local = threading.local()
        self._warned_part_sizes = False
        self.retried = 0
        self.received = InFlightBytes()  # the bodies' bytes so far, for status (:mod:`.received`)

    def active_temps(self) -> list[Path]:
        """Temp files this downloader wrote that are still there: downloads in progress, and
        finished ones not yet admitted or removed (the sampler removes them when it stops, after
        the admitter has finished). A finished download stays listed until its file is gone
        because, once streaming ends, its result may still be in a worker (closing the reader,
        verifying) or in the results queue when the stop's grace ends, and then nobody else
        would remove it."""
        self._prune()
        with self._lock:
            return list(self._temps)

    def _prune(self) -> None:
        """Forget the temps whose file is gone (admitted: renamed into objects/; or removed).
        A temp listed since the last look began is left to the next one: a worker lists its temp
        before it creates the file (so that a stop finds it whatever happens next), and a look
        in between saw no file and forgot one that was then written (the look's own worker's
        temp at every look). A name never comes back (each temp's is new), so a stale check only
        keeps one longer."""
        with self._lock:
            fresh, self._fresh = self._fresh, set()
            temps = [t for t in self._temps if t not in fresh]
        gone = [t for t in temps if not t.exists()]
        with self._lock:
            self._temps.difference_update(gone)
            self._prune_at = max(PRUNE_AT, 2 * len(self._temps))

    def _track(self, temp: Path) -> None:
        """List ``temp``; past twice the count kept at the last look, forget the ones gone
        (amortised: one stat per download, whatever the run's length). The worker that finds
        the look due moves the mark before it looks: every worker tracks its download while the
        look stats the names, and each of them found it due as well (32 workers, 32 looks at
        the same 1,024 names: 36 stats per download in a run of 1,500)."""
        with self._lock:
            self._temps.add(temp)
            self._fresh.add(temp)
            due = len(self._temps) >= self._prune_at
            if due:
                self._prune_at = 2 * len(self._temps)
        if due:
            self._prune()

    def fetch(self, cand: Candidate) -> FetchResult:
        """Download ``cand`` with retries; never raises except :class:`LocalWriteError`."""
        attempt = 0
        while True:
            attempt += 1
            if self.stop.is_set():
                return FetchResult(cand, None, "stopping", attempt - 1, cancelled=True)
            metrics = process_metrics()  # retried/failed, fetch seconds, downloads in flight
            try:
                started = time.monotonic()
                with metrics.download():
                    admission = self._attempt(cand)
                metrics.observe_fetch(time.monotonic() - started)
                return FetchResult(cand, admission, None, attempt)
            except Cancelled:
                return FetchResult(cand, None, "stopping", attempt, cancelled=True)
            except LocalWriteError:
                raise
            except Exception as e:
                reason = f"{type(e).__name__}: {e}".strip()
                kind = failure_kind(e)
                if kind.throttled:
                    metrics.throttled()
                    return FetchResult(cand, None, reason, attempt, throttled=True)
                # Given up here, but not yet failed: the loop may keep the key (an outage, a repair
                # pending); it counts the failure when it skips the key (sampler.breaker.give_up).
                if not kind.retry:
                    return FetchResult(cand, None, reason, attempt)
                if attempt >= self.retry.attempts:
                    return FetchResult(cand, None, f"gave up after {attempt} attempts: {reason}", attempt,
                                       unavailable=kind.outage, gave_up=True)
                metrics.remote_retried()
                with self._lock:
                    self.retried += 1
                delay = self.retry.delay(attempt)
                log.debug("retrying %s in %.2fs after %s", cand.key, delay, reason)
                if self.stop.wait(delay):
                    return FetchResult(cand, None, "stopping", attempt, cancelled=True)

    def _attempt(self, cand: Candidate) -> Admission:
        temp = self.store.temp_path()
        self._track(temp)
        received = self.received.here()
        try:
            # Made before the GET: a volume that can take no file (out of inodes, read-only)
            # refuses it here, and each retry would otherwise cost the remote a request.
            created = create_temp(temp, direct=self.direct and self.block % DIRECT_ALIGN == 0)
            opened: tuple[int, bool] | None = created.fd, created.direct
            try:
                reader = self.remote.open(cand.key, checksum=True)
                try:
                    if reader.size is not None and reader.size != cand.size:
                        raise Changed(f"size is {reader.size}, the listing said {cand.size}")
                    etag_is_md5 = reader.etag_is_md5
                    md5_etag = (reader.content_md5 or plain_md5_etag(reader.etag)
                                or plain_md5_etag(cand.version) if etag_is_md5 else None)
                    plan = checksums.choose(reader.checksum, md5_etag)
                    h = self.hashers(plan.algorithm)
                    # A body checked against a multipart ETag is read back from the file
                    # (_verify_parts): written buffered, that read finds its pages in the page cache.
                    multipart = (checksums.multipart_etag(reader.etag or cand.version)
                                 if etag_is_md5 else None)
                    read_back = plan.kind is None and multipart is not None
                    given, opened = opened, None  # stream_to_temp closes it, whatever happens
                    counted = received.counting(reader.readinto, key=cand.key, size=cand.size,
                                                window=self.stall_window)  # progress; rate floor
                    total = stream_to_temp(counted, self._buffer(), temp, h, cand.size,
                                           stop=self.stop, rate=self.rate, opened=given,
                                           direct=self.direct and not read_back)
                finally:
                    reader.close()
            finally:
                if opened is not None:
                    os.close(opened[0])
            if total != cand.size and reader.size == total:  # a size the body's clean end told
                raise Changed(f"size is {total}, the listing said {cand.size}")
            if total != cand.size:
                raise Transient(f"got {total} bytes, expected {cand.size}")
            got = digests.value(plan.algorithm, h)
            kind = self._verify(cand, temp, plan, got, multipart)
        except BaseException:
            self._forget(temp)  # the download is not returned: nobody else would remove it
            raise
        finally:
            received.n = 0  # its bytes are the admission's now, or nobody's
        digest = f"{plan.algorithm}:{got}"
        checksum = SIZE_ONLY if kind == SIZE_ONLY else digest
        return Admission(cand.key, cand.sid, total, checksum, (reader.etag or cand.version).strip('"'), temp,
                         digest=digest, verified=kind, inode=created.inode)

    def _forget(self, temp: Path) -> None:
        """Remove the temp of a download that failed, and stop listing it. Called while that
        failure is handled, so it never raises: an unlink the volume refuses (read-only, an I/O
        error) would replace a :class:`LocalWriteError` with an error that reads as the remote's,
        and the key would be skipped for good. Such a temp stays listed (a stop tries it again)
        and is cleared at the next start."""
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        except OSError as e:
            log.warning("cannot remove the temp file %s of a failed download: %s", temp, e)
            return
        with self._lock:
            self._temps.discard(temp)

    def _verify(self, cand: Candidate, temp: Path, plan: checksums.Plan, got: str,
                multipart: tuple[str, int] | None) -> str:
        """Check the written body against what the remote stored; returns the kind of check that
        vouched for it (``size-only`` when nothing could). Raises :class:`Transient` on a mismatch.
        ``multipart``: the object's multipart ETag, parsed (None without one, or where the remote
        says its ETags are not content hashes: S3 objects encrypted with KMS or customer keys)."""
        if plan.kind is not None:
            if got != plan.expected:
                what = "the ETag" if plan.kind == checksums.ETAG_MD5 else "the stored checksum"
                raise Transient(f"{plan.algorithm} {got} does not match {what} {plan.expected}")
            return plan.kind
        first = self.remote.part_size(cand.key, 1) if multipart is not None else None
        if multipart is not None and first is not None:
            if first <= 0 < cand.size:
                self._no_part_sizes(cand, f"answers HEAD ?partNumber=1 with Content-Length {first} "
                                          "(a proxy between here and the store that drops HEAD lengths?)")
                return SIZE_ONLY
            why = self._verify_parts(cand, temp, multipart, self.remote, first)
            if why is not None:
                self._no_part_sizes(cand, why)
                return SIZE_ONLY
            return checksums.ETAG_MULTIPART
        return SIZE_ONLY

    def _no_part_sizes(self, cand: Candidate, why: str) -> None:
        """The sizes of a multipart object's parts cannot be had (``why``), so no body could be
        hashed into its ETag. Such objects are admitted checked by their size, as a remote
        without checksums gives them (the manifest says ``size-only``), with one WARNING a run
        naming the cause: failed as Transient, each would be retried and skipped, never cached."""
        if not self._warned_part_sizes:
            self._warned_part_sizes = True
            log.warning("the remote %s: the parts' sizes of %r (%d bytes, multipart ETag) cannot be "
                        "had, so its multipart ETag cannot be checked; such objects are admitted "
                        "checked by size only (manifest: size-only)", why, cand.key, cand.size)

    @staticmethod
    def _verify_parts(cand: Candidate, temp: Path, multipart: tuple[str, int], remote: Remote,
                      first: int) -> str | None:
        """Re-hash the written file part by part into the multipart ETag: with the parts the same
        size as the first (one HEAD), else with every part's size asked (one HEAD each, up to
        :data:`~.checksums.MAX_PART_HEADS`). None when it matches; why not, when the parts'
        sizes cannot be had (more parts of uneven sizes than are asked; sizes that do not add up
        to the object's, as from a store that ignores ``partNumber``): an object that could not
        be checked is no corrupt one. :class:`Transient` when sizes known to be the parts' do
        not hash to the ETag (the body is wrong)."""
        tag, count = multipart
        wanted = f"{tag}-{count}"
        sizes = checksums.uniform_parts(cand.size, count, first)
        if sizes is not None and checksums.parts_etag(temp, sizes) == wanted:
            return None
        if 1 < count <= checksums.MAX_PART_HEADS:
            asked = [remote.part_size(cand.key, i) for i in range(1, count + 1)]
            known = [size for size in asked if size is not None]
            if len(known) < count or sum(known) != cand.size:
                return "gives part sizes that do not add up to the object's (it ignores partNumber?)"
            if checksums.parts_etag(temp, known) == wanted:
                return None
        elif sizes is None or remote.part_size(cand.key, count) != sizes[-1]:
            # More parts than are asked: their sizes guessed from the first, and the last one's
            # size (one HEAD) tells a guess that fit the total by chance from a wrong body.
            return (f"stores {count} parts of uneven sizes, more than the {checksums.MAX_PART_HEADS} "
                    "whose sizes are asked")
        raise Transient(f"the parts of the body do not hash to the multipart ETag {wanted}")

    def _buffer(self) -> memoryview:
        """This thread's block buffer, reused by every download it makes (no allocation per block):
        anonymous ``mmap`` memory, page-aligned as a direct write's buffer must be."""
        buf: memoryview | None = getattr(self._local, "buf", None)
        if buf is None:
            buf = self._local.buf = memoryview(mmap.mmap(-1, self.block))
        return buf


__all__ = ["WRITE_PIECE", "Cancelled", "Downloader", "FetchResult", "LocalWriteError", "RetryPolicy",
           "failure_kind", "is_transient", "is_unavailable"]
