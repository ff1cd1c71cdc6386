"""What the supervisor tells the outside: the metrics registry, the HTTP endpoints on their ports,
the served-opens counter, the Kubernetes reporter, the totals it saves every couple of seconds and
before a scrape of ``/metrics`` shows them (so a restart resumes at or above any value shown), and
the state file ``epochfs status`` reads (:data:`~epochfs.sidecar.store.stats.STATE_FILE_NAME`: why
the sampler is retrying) and the same as a meta value of the index, which the mount's
``status.json`` shows.

Its own module because it is the supervisor's one place that wires callbacks into other layers
(:mod:`~epochfs.sidecar.endpoints`, :mod:`~epochfs.sidecar.served`, :mod:`~epochfs.sidecar.kube`,
:mod:`~epochfs.sidecar.metrics`) and holds the port rule: ``/metrics`` is served on the health
port, or only on ``--metrics-port`` when that is given and differs. None of it decides anything
about the children or the mount; a failure here is logged, never fatal to supervision, but for a
port that cannot be bound at the start: that refuses the start (exit 2, one line naming the flag and
the port), as no probe could reach the sidecar.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from epochfs.sidecar import kube
from epochfs.sidecar.config import SidecarSettings
from epochfs.sidecar.store import Meta, Stats, Store
from epochfs.sidecar.store.objects import OBJECTS_DIR, clear_replace_temps, replace_file
from epochfs.sidecar.store.stats import STATE_FILE_NAME
from epochfs.sidecar.supervisor.outage import outage_state, running_outage, state_key
from epochfs.sidecar.supervisor.ports import open_ports, ports
from epochfs.torchclient.layout import epoch_name

if TYPE_CHECKING:
    from epochfs.sidecar.supervisor.children import Child

log = logging.getLogger("epochfs.supervisor")

_TOTALS_LOCK = threading.Lock()
"""One save of the supervisor's totals at a time: the loop's and a scrape's (one supervisor a
process)."""

_SCRAPE_SAVE_LOCK = threading.Lock()
"""Guards which thread makes the scrapes' save (:meth:`Observability._scrape_totals`)."""

SCRAPE_SAVE_WAIT = 2.0
"""Seconds a scrape of ``/metrics`` waits for its save of the totals; past it (another writer
holds the index: a long cut) it answers with what the store held, and the save goes on. Well
inside the endpoints' 10 s and Prometheus's default scrape timeout of 10 s."""

TOTALS_LOG_EVERY = 60.0
"""Seconds between two lines about totals that still cannot be saved (a full volume)."""

METRICS_DIR_NAME = "metrics"
"""Folder of the cache where the children write their Prometheus multiprocess files."""


def _ours_or_stale(path: Path) -> bool:
    """Whether the state file at ``path`` may be removed: it is this process's, or its writer is
    gone (a supervisor killed with -9), or it cannot be read. A second supervisor on the same cache
    (its sampler is refused: one per cache) must not remove the first one's."""
    try:
        return _ours_or_gone(path.read_text())
    except FileNotFoundError:
        return False
    except OSError:
        return True


def _ours_or_gone(text: str | None) -> bool:
    """Whether a state document (the file's, or :data:`Meta.SAMPLER_RETRYING`'s) may be removed:
    there is one, and it is this process's, or its writer is gone, or it cannot be read."""
    if text is None:
        return False
    try:
        pid = int(json.loads(text).get("pid", 0))
    except (ValueError, AttributeError, TypeError):
        return True
    if pid == os.getpid() or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def load_reporter(settings: SidecarSettings, mount: Path) -> kube.Reporter:
    """The Kubernetes reporter: Events and a status annotation inside a cluster, a no-op outside
    (``kube.from_environment`` says why in one log line). Its calls only record and return; a
    background thread sends."""
    reporter = kube.from_environment(
        mount=str(mount), reporting=settings.kube_reporting,
        status_interval=settings.kube_status_interval, error_threshold=settings.kube_error_threshold,
    )
    reporter.start()
    return reporter


class Observability:
    """The :class:`~epochfs.sidecar.supervisor.Supervisor`'s metrics, endpoints, served counter
    and reporter calls (a mixin: the attributes below are set by its ``__init__``)."""

    settings: SidecarSettings
    cache: Path
    http_host: str
    _store: Store | None
    _multiproc_dir: Path | None
    _metrics: Any
    _endpoints: list[Any]
    _counter: Any
    _reporter: kube.Reporter | None
    _seen: dict[str, Any]

    if TYPE_CHECKING:
        sampler: Child
        view: Child

        def health(self) -> tuple[bool, dict[str, Any]]: ...

        def ready(self) -> tuple[bool, dict[str, Any]]: ...

        def retry_note(self, child: Child) -> str | None: ...

        mount: Path

    def _stats(self) -> Stats | None:
        if self._store is None:
            return None
        try:
            return self._store.stats()
        except Exception as e:
            log.warning("store stats: %s", e)
            return None

    @staticmethod
    def _safe(fn: Callable[..., Any], *args: Any) -> None:
        """A side duty of the loop (the kube reporter's calls, the orphans' reaping): its failure
        is logged with its traceback and the loop goes on."""
        try:
            fn(*args)
        except Exception:
            log.exception("supervisor duty %s failed", getattr(fn, "__name__", fn))

    def _periodic(self) -> None:
        """Every couple of seconds: save the supervisor's totals, tell the reporter."""
        if self._store is None or self._metrics is None:
            return
        self._saved_totals()
        if self._reporter is None:
            return
        stats = self._stats()
        if stats is None:
            return
        rep = self._reporter
        self._seen.setdefault("epoch", stats.latest_epoch)  # epochs cut before we started: no Event
        if stats.latest_epoch is not None and stats.latest_epoch != self._seen.get("epoch"):
            self._seen["epoch"] = stats.latest_epoch
            self._safe(rep.on_cut, stats.latest_epoch, int(stats.epochs[-1]["samples"]))
        if stats.backpressure != self._seen.get("backpressure", False):
            self._seen["backpressure"] = stats.backpressure
            self._safe(rep.on_backpressure, stats.backpressure, stats.backpressure_reason)
        if stats.publish_paused != self._seen.get("publish_paused"):
            self._seen["publish_paused"] = stats.publish_paused
            self._safe(rep.on_publish_paused, stats.publish_paused)
        # Downloads that kept failing, from our start; not the keys the listing refused (hostile
        # names) nor objects too large for the volume: no remote error, and no retry to announce.
        previous = self._seen.setdefault("failed", stats.failed_total)
        if stats.failed_total > previous:
            self._seen["failed"] = stats.failed_total
            self._safe(rep.on_remote_errors, stats.failed_total - previous)
        self._safe(rep.update_status, stats.to_json())

    def _saved_totals(self) -> tuple[dict[str, float], dict[str, float]]:
        """Save the totals and the children's restarts when they changed since the last save, or
        the store lost them (an index rebuilt); returns what the store holds then. Every couple of
        seconds, and at each scrape of ``/metrics`` before it answers (a thread of the endpoints:
        :class:`~epochfs.sidecar.metrics.SavedFirst`), so that a supervisor killed with -9 resumes
        at or above every value a scrape has shown; a lock makes the two one save at a time."""
        assert self._store is not None and self._metrics is not None
        with _TOTALS_LOCK:
            totals, restarts = self._metrics.totals(), self._metrics.restarts()
            try:
                lost = self._store.meta(Meta.SIDECAR_TOTALS) is None
            except Exception:  # the index damaged or busy: the save below says so, or succeeds
                lost = True
            if lost or totals != self._seen.get("totals") or restarts != self._seen.get("restarts"):
                self._save_totals(totals, restarts)
            if lost:  # an index rebuilt lost the report URL too: the supervisor's loop records it again
                self._seen["report_url"] = None
            return dict(self._seen.get("totals") or {}), dict(self._seen.get("restarts") or {})

    def _scrape_totals(self) -> tuple[dict[str, float], dict[str, float]]:
        """:meth:`_saved_totals` for a scrape, waited for at most :data:`SCRAPE_SAVE_WAIT`: a save
        waits in SQLite for any writer of the index (up to its 30 s busy timeout), and a scrape
        that waited past the endpoints' 10 s failed with a 503 and no value at all. Past the wait
        the scrape shows what the store held before (never more than is saved); the save goes on
        on its thread, one at a time (a scrape while one runs waits for it, not for another)."""
        with _SCRAPE_SAVE_LOCK:  # not _TOTALS_LOCK: a save stuck in SQLite holds that one
            running = self._seen.get("scrape_save")
            if running is None or not running.is_alive():
                running = threading.Thread(target=self._saved_totals, name="totals-save", daemon=True)
                self._seen["scrape_save"] = running
                running.start()
        running.join(SCRAPE_SAVE_WAIT)
        # What the store holds now: this save's result once it ended, the last one's before.
        return dict(self._seen.get("totals") or {}), dict(self._seen.get("restarts") or {})

    def _save_totals(self, totals: dict[str, float], restarts: dict[str, float] | None = None) -> None:
        """Save the totals (and the children's restarts) in the index. A failure (a full volume)
        is tried again at the next tick: said when it starts, at most once a minute while it lasts
        (with the tries since the last line), and when a save succeeds again, not every couple of
        seconds as it was (30 lines a minute for as long as the volume stayed full)."""
        assert self._store is not None
        failing: dict[str, Any] | None = self._seen.get("totals_failing")
        now = time.monotonic()
        try:
            if restarts is not None:
                self._store.set_meta(Meta.SIDECAR_RESTARTS, json.dumps(restarts, sort_keys=True))
                self._seen["restarts"] = restarts
            self._store.set_meta(Meta.SIDECAR_TOTALS, json.dumps(totals, sort_keys=True))
        except Exception as e:
            if failing is None:
                log.warning("saving totals: %s (tried again every couple of seconds; said again at "
                            "most once a minute while it fails)", e)
                self._seen["totals_failing"] = {"said": now, "tries": 0}
                return
            failing["tries"] += 1
            if now - failing["said"] >= TOTALS_LOG_EVERY:
                log.warning("saving totals still fails: %s (%d tries since the last line)", e,
                            failing["tries"])
                failing.update(said=now, tries=0)
            return
        self._seen["totals"] = totals
        if failing is not None:
            del self._seen["totals_failing"]
            log.info("saving totals: saved again")

    def _save_state(self) -> None:
        """Write (or remove) :data:`STATE_FILE_NAME` and :data:`Meta.SAMPLER_RETRYING` when the
        sampler's retry state changes: each tick compares a small key, so they are written once
        per transient exit and once per restart, never per tick; or, while the running sampler
        records an outage of the remote in the index, at each of its pauses and every 30 s
        (:mod:`.outage`). Times are wall-clock (other processes read them)."""
        child = self.sampler
        proc, note = child.proc, self.retry_note(child)
        self._seen["outage"] = running_outage(self._store, child)  # the probes' (.outage.shown)
        outage = None if note is not None else self._seen["outage"]  # a retry's note first
        key: object = ((child.waiting, child.restarts, proc is None) if note is not None
                       else None if outage is None else state_key(outage))
        file_due = "state" not in self._seen or self._seen["state"] != key
        meta_due = "retrying" not in self._seen or self._seen["retrying"] != key
        if not (file_due or meta_due):
            return
        sampler: dict[str, Any] | None = None
        if outage is not None:
            sampler = outage_state(outage)
        elif key is not None:
            wall = time.time() - time.monotonic()
            sampler = {
                "waiting": child.waiting,
                "retry": child.restarts + (1 if proc is None else 0),
                "next_start": round(wall + child.next_start, 3) if proc is None else None,
                "started": round(wall + child.started_at, 3) if proc is not None else None,
            }
        if meta_due:
            self._save_retrying(key, sampler)
        if not file_due:
            return
        path = self.cache / STATE_FILE_NAME
        try:
            if "state" not in self._seen:  # the first look: the temps of a supervisor killed mid-write
                clear_replace_temps(path)
            if key is None:
                if _ours_or_stale(path):
                    path.unlink(missing_ok=True)
            else:
                doc = {"pid": os.getpid(), "mount": str(self.mount), "sampler": sampler}
                # A reader sees the old document or the new one, whole (temp, fsync, rename).
                replace_file(path, (json.dumps(doc, sort_keys=True) + "\n").encode())
            self._seen["state"] = key
        except OSError as e:
            if self._seen.get("state_error") != str(e):
                self._seen["state_error"] = str(e)
                log.warning("writing %s: %s", path, e)

    def _save_retrying(self, key: object, sampler: dict[str, Any] | None) -> None:
        """The state file's ``sampler`` part as a meta value of the index, for the mount's
        ``status.json`` (``sampler_retrying``): the views render it from the index alone, and a
        trainer reads the mount, not the cache. Removed by the same rules as the file; a failed
        write is logged once and tried again at the next tick."""
        store = self._store
        if store is None:
            return
        try:
            if sampler is None:
                if _ours_or_gone(store.meta(Meta.SAMPLER_RETRYING)):
                    store.set_sampler_retrying(None)
            else:
                store.set_sampler_retrying({"pid": os.getpid(), **sampler})
            self._seen["retrying"] = key
        except Exception as e:  # the index busy or damaged: the sampler's business, not ours
            if self._seen.get("retrying_error") != str(e):
                self._seen["retrying_error"] = str(e)
                log.warning("recording the sampler's retry in the index: %s", e)

    def _setup_observability(self) -> None:
        from prometheus_client import CollectorRegistry, disable_created_metrics

        from epochfs.sidecar import cutrequest, endpoints, metrics, served, served_pins

        disable_created_metrics()
        # A fixed folder in the cache, emptied at every start: a supervisor killed with -9 leaves
        # its children's metric files behind, and the next one must not sum them (nor pile up
        # folders in /tmp). Emptied only by the cache's one sidecar: its lock (core, _hold_cache)
        # refused any other before it came here.
        self._multiproc_dir = metrics.prepare_multiproc_dir(self.cache / METRICS_DIR_NAME)
        # The child series of the children this sidecar runs, and only those (fuse or publisher).
        sidecar_metrics = metrics.SidecarMetrics(registry=CollectorRegistry(auto_describe=True),
                                                 children=(self.sampler.name, self.view.name))
        assert self._store is not None
        saved = self._store.meta(Meta.SIDECAR_TOTALS)
        if saved:
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                sidecar_metrics.resume({k: float(v) for k, v in json.loads(saved).items()})
                self._seen["totals"] = sidecar_metrics.totals()  # what a restart resumes: saved
        saved = self._store.meta(Meta.SIDECAR_RESTARTS)
        if saved:
            with contextlib.suppress(ValueError, TypeError, AttributeError):
                sidecar_metrics.resume_restarts({str(k): float(v) for k, v in json.loads(saved).items()})
                self._seen["restarts"] = sidecar_metrics.restarts()
        self._metrics = sidecar_metrics
        # process_* of each child by its current pid, read at scrape time (a restart is followed).
        sampler, view = self.sampler, self.view
        registry = metrics.sidecar_registry(
            stats=self._stats, multiproc_dir=self._multiproc_dir, sidecar=sidecar_metrics,
            children={sampler.name: lambda: sampler.pid, view.name: lambda: view.pid,
                      # the sampler's child (--list-process): found under the sampler's pid
                      "listing": metrics.child_of(lambda: sampler.pid, metrics.LISTING_NAME)},
            save=self._scrape_totals,
        )

        # Reads the view does not see: the torch client's reports, opens by resolved paths.
        reads = served_pins.ReadRecords(self._store)

        def on_report(r: endpoints.ClientReport) -> None:
            sidecar_metrics.add_client_report(samples=r.samples, nbytes=r.nbytes,
                                              wait_seconds=r.wait_seconds)
            reads.client_epochs(r.epochs, client=r.client)

        def unpublished(n: int) -> str | None:
            """Folder view: why live epoch ``n`` is not in the folder (its publisher paused)."""
            assert self._store is not None
            paused = self._store.meta(Meta.PUBLISH_PAUSED)
            if paused and not (self.settings.mount / epoch_name(n)).is_dir():
                return paused
            return None

        def on_cut(request: cutrequest.CutRequest) -> tuple[int, dict[str, Any]]:
            assert self._store is not None
            return cutrequest.answer(self._store, request,
                                     unpublished=unpublished if self.settings.view == "folder" else None,
                                     cut_waited=sidecar_metrics.cut_waited,
                                     read_ahead=served_pins.CLIENT_AHEAD)  # the asker: a client about to read

        self._endpoints += open_ports(ports(self.settings.health_port, self.settings.metrics_port),
                                      host=self.http_host, health=self.health, ready=self.ready,
                                      registry=registry, cache=self.cache, on_report=on_report, on_cut=on_cut)
        self._counter = served.OpenCounter(
            objects_dir=self.cache / OBJECTS_DIR,
            on_open=sidecar_metrics.add_served,
            on_lost=sidecar_metrics.served_lost_events.inc, objects=reads,
        )
        if not self._counter.start():
            self._counter = None
