"""The documents behind ``/healthz`` and ``/readyz``: when the sidecar is alive, when it is ready.

Its own module because these two answers are a contract with the kubelet (a failed liveness
restarts the pod; readiness gates the trainer), so their rules stand together and apart from the
machinery that produces the facts they read (the probe, the children, the store's one cut
condition). The endpoints call them on worker threads of their own.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from epochfs.sidecar.config import EXIT_INDEX, INDEX_DAMAGES_UNHEALTHY
from epochfs.sidecar.status_estimate import FetchRate, estimate
from epochfs.sidecar.store import Stats, Store
from epochfs.sidecar.supervisor.children import Child
from epochfs.sidecar.supervisor.outage import shown
from epochfs.sidecar.supervisor.watch import MountWatch, probe

log = logging.getLogger("epochfs.supervisor")


class HealthChecks(MountWatch):
    """The :class:`~epochfs.sidecar.supervisor.Supervisor`'s answers to the probes (a mixin)."""

    MOUNT_GRACE = 10.0
    """Seconds a FUSE server that has not mounted yet is "mounting" for /healthz, not a failure
    (a remount takes about one; a server still not mounted after this fails the probe)."""

    UNHEALTHY_CRASHES = 5
    """Consecutive quick sampler crashes after which /healthz fails (the pod gets restarted). A
    transient failure (the remote unreachable, or the cache's volume full, at the sampler's
    start: :attr:`Child.waiting`) is not one: the process is healthy, the remote or the volume is
    not, and a new pod would meet the same."""
    UNHEALTHY_INDEX_DAMAGES = INDEX_DAMAGES_UNHEALTHY
    """Sampler exits on a damaged index in a row, with no good run between, after which /healthz
    fails (:mod:`.indexdamage`); one such exit is mended by the next start and is no failure."""

    sampler: Child
    view: Child
    folder_view: bool
    _store: Store | None
    _seen: dict[str, Any]
    """The supervisor loop's last readings: ``outage``, the running sampler's outage of the remote
    as the index records it (:mod:`.outage`), read at each tick and never by a probe."""

    @functools.cached_property
    def _fetch_rate(self) -> FetchRate:
        """The fetch rate over /readyz's own recent readings, for epoch 0's estimate (made on
        first use: a mixin has no __init__ of its own)."""
        return FetchRate()

    _health_ok = True
    """The last /healthz verdict (:meth:`_log_health_change`)."""

    @functools.cached_property
    def _health_lock(self) -> threading.Lock:
        """What the probes' threads change :attr:`_health_ok` under (made on first use, as
        :attr:`_fetch_rate`)."""
        return threading.Lock()

    if TYPE_CHECKING:
        def _stats(self) -> Stats | None: ...

    def health(self) -> tuple[bool, dict[str, Any]]:
        """Alive: the FUSE server runs, its mount is up (``mount``: "not mounted" when not) and
        answers a stat within the deadline; the sampler runs, or is being restarted after fewer
        than UNHEALTHY_CRASHES quick crashes in a row (transient failures, however many, do not
        count: /readyz says why it waits); and it met a damaged index on fewer than
        UNHEALTHY_INDEX_DAMAGES runs in a row (``reason`` says so when it did: the sampler is
        restarted all the same, and the next good run heals); and the link root the epochs'
        files point into shows the cache's objects folder (``link_root`` says why when it does not
        and the watch could not make it do so: :meth:`~.watch.MountWatch._watch_link_root`)."""
        # An empty folder where the FUSE mount was (or will be) answers a stat too: "ok" only for
        # a view that is up, as /readyz tells it. A server started moments ago (a remount after a
        # crash, about a second) is "mounting", not a failure: liveness must not count a
        # recovery in progress, only a server that does not mount.
        mounted = self.folder_view or self._view_mounted()
        answer = probe(self.mount, timeout=self.stat_timeout) if mounted else (
            "mounting" if self.fuse.alive and time.monotonic() - self.fuse.started_at < self.MOUNT_GRACE
            else "not mounted")
        with self._children_lock:
            sampler_ok, view_ok = [c.alive or c.crashes < self.UNHEALTHY_CRASHES
                                   for c in (self.sampler, self.view)]
            damages = self.sampler.index.in_row
        ok = ((view_ok if self.folder_view else self.fuse.alive) and answer in ("ok", "mounting")
              and sampler_ok)
        doc: dict[str, Any] = {"mount": answer, "children": self._children_doc()}
        link_root = None if self.folder_view else self._link_root_problem
        if link_root is not None:  # the view answers, but no file of any epoch can be read
            ok = False
            doc["link_root"] = link_root
        if damages >= self.UNHEALTHY_INDEX_DAMAGES:
            ok = False
            doc["reason"] = (f"the sampler found the cache index damaged {damages} times in a row "
                             f"(exit {EXIT_INDEX}), with no run between that cut an epoch or ran "
                             f"{self.STABLE_AFTER:.0f} s: the node volume may be failing")
        self._log_health_change(ok, doc)
        return ok, doc

    def _log_health_change(self, ok: bool, doc: dict[str, Any]) -> None:
        """One line when /healthz starts failing, with why (the kubelet's event says only "503"),
        and one when it passes again."""
        with self._health_lock:
            was, self._health_ok = self._health_ok, ok
        if was and not ok:
            log.warning("/healthz fails now (the kubelet restarts the pod after the probe's "
                        "failureThreshold): %s", health_problems(doc))
        elif ok and not was:
            log.info("/healthz passes again")

    def ready(self) -> tuple[bool, dict[str, Any]]:
        """Ready: mounted (folder view: published), and the first epoch a new trainer reads
        exists or could be cut now: ``first_epoch``, the newest live epoch on a kept cache (epoch
        numbers are never reused, so its epoch 0 may be gone for good), else the first cut (0 on a
        new cache). ``epoch0`` says whether it is ready (its name from the new cache's case). When
        not, ``reason`` says why in words (a listing that found nothing first: waiting would not
        help; then a remote that cannot be reached, with the sampler's next retry, or the outage
        the running sampler waits out and its cause (credentials refused), since no data comes
        until it answers; then how far the first epoch is, ``epoch 0: 54/200 samples cached,
        ~20 s at 2.7 samples/s (2.1 MiB/s)``, the estimate from the fetch rate between this answer's
        reading and an earlier one's, at most :attr:`FetchRate.WINDOW` s back or the last before).
        ``retrying`` holds that line whenever there is one, ready or not (an epoch kept from a
        previous run is readable while the remote is down); ``outage`` and ``outage_cause``
        (``credentials_refused``, ``remote_unavailable``) the running sampler's outage, as it
        recorded it in the index (:mod:`.outage`), the same way."""
        stats = self._stats()
        rate = (None if stats is None else
                self._fetch_rate.record(time.monotonic(), stats.fetched_total,
                                        stats.fetched_bytes_total + stats.inflight_downloaded_bytes))
        first_epoch, cuttable = (None, False) if stats is None else self._first_epoch(stats.latest_epoch)
        mounted = self._view_mounted()
        doc: dict[str, Any] = {
            "mounted": self._mounted,
            "epoch0": cuttable,
            "first_epoch": first_epoch,
            "samples": 0 if stats is None else stats.samples,
        }
        warning = (stats.listing or {}).get("warning") if stats is not None else None
        retrying = self.retry_note(self.sampler)
        if retrying:
            doc["retrying"] = retrying
        outage = shown(self._seen.get("outage"), self.sampler)
        if outage is not None:  # ready or not, as the retry: the cause of no new data
            doc["outage"], doc["outage_cause"] = outage.words, outage.cause
            retrying = retrying or outage.words
        if warning:
            doc["reason"] = warning
        elif retrying and not (mounted and cuttable):
            doc["reason"] = retrying
        elif not mounted:
            doc["reason"] = self._view_hung or "the view is not mounted yet"
        elif not cuttable:
            n = 0 if first_epoch is None else first_epoch
            first = (stats.first_epoch if stats is not None else None) or {}
            if first.get("warning"):
                doc["reason"] = (f"epoch {n}: {first.get('samples', 0)}/{first.get('target')} samples "
                                 f"cached; {first['warning']}")
            elif first.get("samples", 0) >= first.get("target", 1) and first.get("listing_round"):
                doc["reason"] = f"epoch {n} waits for the listing's first round (a page of every folder)"
            elif first and stats is not None:
                have, target = int(first["samples"]), int(first["target"])
                per_s, bytes_per_s = rate or (None, None)
                inflight = (stats.inflight_downloaded_bytes, stats.inflight_bytes)
                doc["reason"] = (f"epoch {n}: {have}/{target} samples cached"
                                 + estimate(have, target, per_s, bytes_per_s, inflight) + _skips(stats))
            else:
                doc["reason"] = f"epoch {n} cannot be cut yet"
        return mounted and cuttable, doc

    def _first_epoch(self, latest_epoch: int | None) -> tuple[int | None, bool]:
        """The first epoch a new trainer reads (the torch client's ``start_epoch`` rule) and
        whether it exists or could be cut now: the newest live epoch, which exists, once there is
        one (a kept cache's epoch 0 has retired for good, and a new run starts at its newest);
        else the first cut, 0 or the number after the high-water mark once an index was reset,
        by the store's one cut condition. (None, False) when the store cannot be read."""
        if latest_epoch is not None:
            return latest_epoch, True
        assert self._store is not None
        try:
            n = self._store.next_epoch()
            return n, self._store.cut_ready(n)
        except Exception as e:
            log.warning("store cut condition: %s", e)
            return None, False

    def _children_doc(self) -> dict[str, Any]:
        """Each child's pid, whether it runs, its restarts, last exit status, quick crashes and
        index-damage exits in a row (what health counts), ``retrying`` when its last exit
        was a transient failure and ``outage`` while its run waits out the remote's outage."""
        doc: dict[str, Any] = {}
        with self._children_lock:  # one consistent reading of each child (a restart in between)
            for c in (self.sampler, self.view):
                doc[c.name] = {"pid": c.pid, "alive": c.alive, "restarts": c.restarts,
                               "last_exit": c.last_exit, "crashes": c.crashes,
                               "index_damages": c.index.in_row}
                note = self.retry_note(c)
                if note:
                    doc[c.name]["retrying"] = note
                if c is self.sampler and (outage := shown(self._seen.get("outage"), c)) is not None:
                    doc[c.name]["outage"] = outage.words
        return doc


def health_problems(doc: dict[str, Any]) -> str:
    """What a failing /healthz document says, in one line."""
    problems = [] if doc.get("mount") in ("ok", "mounting") else [f"mount: {doc.get('mount')}"]
    for name, child in (doc.get("children") or {}).items():
        if not child.get("alive"):
            problems.append(f"{name} not running (last exit {child.get('last_exit')}, "
                            f"{child.get('crashes')} quick crash(es) in a row)")
    problems += [f"link root: {doc['link_root']}"] if doc.get("link_root") else []
    problems += [str(doc["reason"])] if doc.get("reason") else []
    return "; ".join(problems) or "see /healthz"


def _skips(stats: Stats | None) -> str:
    """The keys given up after their downloads failed, while the cache is empty: a catalog whose
    every read is refused (an IAM policy that lists and cannot read) is otherwise shown as "0/1
    samples cached" for ever. Keys the listing left out (over the object limit) are not these: a
    relist does not bring them, and the listing's own warning names them."""
    if stats is None or stats.samples or not stats.failed_total:
        return ""
    return (f"; {stats.failed_total} key(s) given up after their downloads failed (the sampler's "
            "log says why; fix it, then epochfs relist)")
