"""``epochfs sample``: list the remote, then fetch it in sampling order into the node cache.

One loop on the main thread decides what to fetch and owns every store write that changes what is
visible (reserve, admit, cuts); a pool of worker threads only downloads into temp files. So
capacity accounting stays in one place: a download starts only once :meth:`Store.reserve` has made
room for it (evicting the samples admitted first that no live epoch holds), and when nothing can be
evicted the loop raises backpressure in the store and waits for a cut or a retirement to free room.

Order of a run: open or create the cache, run recovery (and log what it repaired), record the
policy, list the catalog, then loop until SIGTERM/SIGINT:

- take the next candidates in sampling order (snapshot mode: a cursor over the order that starts
  a new pass when it reaches the end, so a dataset larger than the cache streams through it; schedule
  mode: the missing keys of the next epoch's window first, then those of the windows after it, never
  keys in front of the window, which the epoch budget has trimmed);
- reserve, download with ``--concurrency`` in flight, admit verified downloads in batches;
- serve queued cut requests after each batch, cut on the ``--cut-interval`` timer;
- log a progress line every few seconds.

Stopping: the workers see the stop flag between blocks and abandon their downloads; finished ones
are admitted, temp files are removed, reservations released, and the command exits 0.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import queue
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from epochfs.sidecar.catalog import CatalogReport, build_catalog
from epochfs.sidecar.config import ConfigError, SamplerSettings, format_size
from epochfs.sidecar.download import Downloader, FetchResult, LocalWriteError, RetryPolicy
from epochfs.sidecar.metrics import process_metrics
from epochfs.sidecar.ratelimit import RateLimiter
from epochfs.sidecar.remote import Remote, RemoteError, open_remote
from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.store import Admission, Candidate, Meta, Policy, Store

log = logging.getLogger("epochfs.sampler")

ADMIT_BATCH = 512
"""Most verified downloads made visible in one store transaction (the admitter takes what is
waiting, so batches grow with the download rate and stay small when it is low)."""
POLL = 0.2
"""Seconds between checks of the store while waiting (backpressure, idle, pending cuts)."""
REFILL = 512
"""Candidates read from the catalog at a time."""
STOP_GRACE = 2.0
"""Seconds the stop waits for in-flight downloads before abandoning them (the supervisor allows
the sampler 5 s to exit before it kills it)."""
OUTAGE_AFTER = 5
"""Consecutive objects given up on remote-wide errors (connection, timeout, 5xx) that make the
sampler treat the remote as down: it then pauses and keeps the keys instead of skipping them."""
OUTAGE_PAUSE = (2.0, 60.0)
"""First and longest pause while the remote is down (doubling in between)."""


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


@dataclass
class _Rates:
    """Counters for the progress line."""

    started: float
    samples: int = 0
    nbytes: int = 0
    skipped: int = 0
    last_time: float = 0.0
    last_bytes: int = 0
    last_samples: int = 0


class Sampler:
    """The fetch loop over an opened store and remote (``run_sample`` builds one)."""

    def __init__(
        self,
        *,
        store: Store,
        remote: Remote,
        settings: SamplerSettings,
        stop: threading.Event,
        progress_every: float = 5.0,
    ) -> None:
        if progress_every <= 0:
            raise ValueError("progress_every must be positive")
        self.store = store
        self.reservations = Reservations(store)
        self.remote = remote
        self.settings = settings
        self.stop = stop
        self.progress_every = progress_every
        self.downloader = Downloader(
            store=store, remote=remote, retry=RetryPolicy(attempts=settings.retries), stop=stop,
            rate=RateLimiter(rate=settings.max_rate) if settings.max_rate else None,
        )
        self._tasks: queue.Queue[Candidate | None] = queue.Queue()
        self._results: queue.Queue[FetchResult | BaseException] = queue.Queue()
        self._inflight: dict[str, Candidate] = {}
        self._admit_q: queue.Queue[Admission | None] = queue.Queue()
        self._admitting: dict[str, Admission] = {}
        self._admit_lock = threading.Lock()
        self._queue: deque[tuple[int, Candidate]] = deque()
        self._cursor: int | None = None
        self._windows: dict[int, tuple[int, int]] = {}
        self._target = -1
        self._lookahead = False
        self._passes = 0
        self._exhausted_at: float | None = None
        self._backpressure = False
        self._fatal: BaseException | None = None
        self._retry: deque[Candidate] = deque()
        self._retry_keys: set[str] = set()
        self._down_streak = 0
        self._pause = OUTAGE_PAUSE[0]
        self._paused_until = 0.0
        self._last_cut = time.monotonic()
        self._samples_at_cut = -1
        now = time.monotonic()
        self._rates = _Rates(started=now, last_time=now)
        self._admit_thread = threading.Thread(target=self._admitter, name="admit", daemon=True)
        self._threads = [
            threading.Thread(target=self._worker, name=f"fetch-{i}", daemon=True)
            for i in range(settings.concurrency)
        ]

    # ------------------------------------------------------------------ workers
    def _worker(self) -> None:
        while True:
            cand = self._tasks.get()
            if cand is None:
                return
            try:
                self._results.put(self.downloader.fetch(cand))
            except BaseException as e:  # LocalWriteError or a bug: the loop stops on it
                self._results.put(e)

    # ------------------------------------------------------------------ candidates
    def _next_candidate(self) -> Candidate | None:
        """The next key to fetch in sampling order, skipping what is already in flight."""
        while self._retry:
            cand = self._retry.popleft()
            self._retry_keys.discard(cand.key)
            if not self._busy(cand.key):
                return cand
        while True:
            if self._queue and self._stale():
                self._queue.clear()
            while self._queue:
                rank, cand = self._queue.popleft()
                if self.settings.schedule is None:
                    self._cursor = rank
                if not self._busy(cand.key):
                    return cand
            if not self._refill():
                return None

    def _busy(self, key: str) -> bool:
        """In flight, waiting for its admission batch, or kept for after an outage."""
        if key in self._inflight or key in self._retry_keys:
            return True
        with self._admit_lock:
            return key in self._admitting

    def _window(self, n: int) -> tuple[int, int]:
        if n not in self._windows:
            self._windows[n] = self.store.schedule_window(n)
        return self._windows[n]

    def _schedule_target(self) -> int:
        """The epoch whose window is fetched first: the lowest requested one, else newest + 1."""
        newest = self.store.newest_epoch()
        target = 0 if newest is None else newest + 1
        pending = self.store.pending_cuts()
        return max(target, pending[0][0]) if pending else target

    def _schedule_rows(self) -> list[tuple[int, Candidate]]:
        """Schedule mode: the missing keys of the next epoch's window, then of the one after it.

        Keys in front of the window (trimmed by the epoch budget) are never fetched again, and the
        next window is looked at only once this one is complete, and no further: a sample admitted
        after a cut cannot be evicted before the next one, so keys of later windows would take the
        room the next window needs.
        """
        target = self._target = self._schedule_target()
        self._lookahead = False
        for n in (target, target + 1):
            lo, hi = self._window(n)
            rows = self.store.window_candidates(lo, hi, limit=REFILL + len(self._inflight))
            if rows:
                # Until this window is complete (in flight counts as missing), look no further.
                self._lookahead = n != target
                return [r for r in rows if not self._busy(r[1].key)]
        return []

    def _reserve(self, cand: Candidate) -> bool:
        """Reserve room for ``cand``; a look-ahead download only takes room that is free.

        Evicting for the next window could take samples of the window before it that were
        fetched ahead of their cut and are not in an epoch yet.
        """
        if self._lookahead:
            policy_capacity = self.settings.capacity
            if self.store.cache_bytes() + self.reservations.reserved + cand.size > policy_capacity:
                return False
        return self.reservations.reserve(cand.size, capacity=self.settings.capacity)

    def _stale(self) -> bool:
        """Schedule mode: a cut or a request moved the target since the queue was filled."""
        return self.settings.schedule is not None and self._schedule_target() != self._target

    def _refill(self) -> bool:
        if self._exhausted_at is not None and time.monotonic() - self._exhausted_at < 1.0:
            return False
        if self.settings.schedule is not None:
            rows = self._schedule_rows()
        else:
            rows = self.store.candidates(after_rank=self._cursor, limit=REFILL)
            if not rows and self._cursor is not None:
                self._cursor = None
                rows = self.store.candidates(after_rank=None, limit=REFILL)
                if [r for r in rows if not self._busy(r[1].key)]:
                    self._passes += 1
                    log.info("pass %d over the catalog done; starting again from the front "
                             "(samples evicted since are fetched again)", self._passes)
        rows = [r for r in rows if not self._busy(r[1].key)]
        if not rows:
            self._exhausted_at = time.monotonic()
            return False
        self._exhausted_at = None
        self._queue.extend(rows)
        return True

    # ------------------------------------------------------------------ the loop
    def run(self) -> None:
        """Fetch until stopped; raises :class:`LocalWriteError` when the node volume fails."""
        for t in self._threads:
            t.start()
        self._admit_thread.start()
        pending: Candidate | None = None
        try:
            while not self.stop.is_set():
                # Start downloads while there is room in flight and in the cache.
                while (len(self._inflight) < self.settings.concurrency and not self.stop.is_set()
                       and time.monotonic() >= self._paused_until):
                    if pending is not None and self._stale():
                        pending = None
                    cand = pending or self._next_candidate()
                    pending = None
                    if cand is None:
                        break
                    if not self._reserve(cand):
                        pending = cand
                        # Full with downloads of our own is not backpressure: they will land.
                        if not self._inflight and not self._admitting:
                            self._set_backpressure(True)
                        break
                    self._set_backpressure(False)
                    self._inflight[cand.key] = cand
                    self._tasks.put(cand)
                self._collect(POLL)
                self._tick(pending)
                if self._fatal is not None:
                    raise self._fatal
        finally:
            self._shutdown()

    def _collect(self, timeout: float) -> None:
        """Take finished downloads: verified ones wait for the next admission batch."""
        try:
            item = self._results.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            self._handle(item)
            try:
                item = self._results.get_nowait()
            except queue.Empty:
                return

    def _handle(self, item: FetchResult | BaseException) -> None:
        if isinstance(item, BaseException):
            self._fatal = self._fatal or item
            return
        cand = item.candidate
        self._inflight.pop(cand.key, None)
        if item.admission is not None:
            self._hand_over(item.admission)
            self._remote_up()
            return
        self.reservations.release(cand.size)
        if item.cancelled:
            return
        if item.unavailable:
            self._down_streak += 1
            if self._down_streak >= OUTAGE_AFTER:
                # The remote is down, not this object: keep the key and pause.
                self._retry.append(cand)
                self._retry_keys.add(cand.key)
                if time.monotonic() >= self._paused_until:
                    log.warning(
                        "remote unavailable (%d objects in a row: %s); pausing %.0fs, keys kept",
                        self._down_streak, item.error, self._pause,
                    )
                    self._paused_until = time.monotonic() + self._pause
                    self._pause = min(OUTAGE_PAUSE[1], self._pause * 2)
                return
        else:
            self._remote_up()
        log.warning("skipping %r: %s", cand.key, item.error)
        self.store.mark_skipped(cand.key)
        self._rates.skipped += 1

    def _remote_up(self) -> None:
        if self._down_streak >= OUTAGE_AFTER:
            log.info("remote reachable again")
        self._down_streak = 0
        self._pause = OUTAGE_PAUSE[0]

    def _hand_over(self, admission: Admission) -> None:
        with self._admit_lock:
            self._admitting[admission.key] = admission
        self._admit_q.put(admission)

    def _admitter(self) -> None:
        """Makes verified downloads visible in batches, off the scheduling thread.

        Admission renames files and fsyncs their folders (a few ms per batch folder); doing it here
        keeps the loop starting downloads meanwhile. ``None`` asks it to finish what it has and end.
        """
        done = False
        while not done:
            first = self._admit_q.get()
            batch: list[Admission] = []
            if first is None:
                done = True
            else:
                batch.append(first)
            while len(batch) < ADMIT_BATCH:
                try:
                    item = self._admit_q.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    done = True
                    break
                batch.append(item)
            if not batch:
                continue
            try:
                self.reservations.admit(batch)
            except BaseException as e:
                if isinstance(e, OSError):
                    e = LocalWriteError(f"admitting {len(batch)} sample(s): {e}")
                self._fatal = self._fatal or e
                for a in batch:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(a.temp)
                    self.reservations.release(a.size)
                return
            finally:
                with self._admit_lock:
                    for a in batch:
                        self._admitting.pop(a.key, None)
            self._rates.samples += len(batch)
            self._rates.nbytes += sum(a.size for a in batch)
            try:
                self._serve_cuts()
            except Exception as e:  # a cut that fails must not stop admissions
                log.error("serving cut requests failed: %s", e)

    def _serve_cuts(self) -> None:
        for n, waited in self.store.process_cut_requests():
            log.info("cut epoch %d on request (waited %.1fs)", n, waited)
            process_metrics().cut_waited(waited)
            self._last_cut = time.monotonic()

    def _set_backpressure(self, on: bool) -> None:
        if on != self._backpressure:
            self._backpressure = on
            self.store.set_backpressure(on)
            if on:
                stats = self.store.stats()
                log.warning(
                    "backpressure: cache full (%s of %s) and nothing evictable; "
                    "waiting for a cut or an epoch to retire",
                    format_size(stats.cache_bytes), format_size(stats.capacity_bytes),
                )
            else:
                log.info("backpressure cleared")

    def _tick(self, pending: Candidate | None) -> None:
        """Timers: cut interval, queued cuts while idle, progress line."""
        now = time.monotonic()
        interval = self.settings.cut_interval
        if interval > 0 and now - self._last_cut >= interval:
            self._last_cut = now
            # An epoch identical to the newest one is only worth it under backpressure, where
            # pushing the oldest pinned epoch out is what frees room.
            if (self._rates.samples != self._samples_at_cut or self._backpressure
                    or self.store.newest_epoch() is None):
                n = self.store.cut()
                if n is not None:
                    self._samples_at_cut = self._rates.samples
                    log.info("cut epoch %d (every %.0fs)", n, interval)
        if not self._inflight:
            self._serve_cuts()
        if now - self._rates.last_time >= self.progress_every:
            self._progress(now, pending)

    def _progress(self, now: float, pending: Candidate | None) -> None:
        r = self._rates
        dt = max(now - r.last_time, 1e-9)
        mbps = (r.nbytes - r.last_bytes) / dt / 1e6
        rate = (r.samples - r.last_samples) / dt
        r.last_time, r.last_bytes, r.last_samples = now, r.nbytes, r.samples
        self.reservations.publish()
        stats = self.store.stats()
        state = "backpressure" if self._backpressure else ("idle" if not self._inflight else "fetching")
        log.info(
            "%s: %d sample(s) fetched this run (%.0f/s, %.1f MB/s), %d in flight, %d skipped, "
            "%d retried; cache %s / %s, %d sample(s), epochs %s",
            state, r.samples, rate, mbps, len(self._inflight), r.skipped, self.downloader.retried,
            format_size(stats.cache_bytes), format_size(stats.capacity_bytes), stats.samples,
            [e["epoch"] for e in stats.epochs] or "none",
        )

    def _shutdown(self) -> None:
        """Admit what finished, abandon the rest, remove temp files, release reservations."""
        self.stop.set()
        for _ in self._threads:
            self._tasks.put(None)
        deadline = time.monotonic() + STOP_GRACE
        while self._inflight and time.monotonic() < deadline:
            try:
                item = self._results.get(timeout=0.1)
            except queue.Empty:
                continue
            if isinstance(item, BaseException):
                self._fatal = self._fatal or item
                continue
            self._inflight.pop(item.candidate.key, None)
            if item.admission is not None:
                self._hand_over(item.admission)
            else:
                self.reservations.release(item.candidate.size)
        try:
            self._admit_q.put(None)
            if self._admit_thread.is_alive():
                self._admit_thread.join(timeout=60)
        finally:
            with self._admit_lock:
                left = list(self._admitting.values())
                self._admitting.clear()
            for a in left:  # only if the admitter failed: nothing of them is visible
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(a.temp)
                self.reservations.release(a.size)
            for temp in self.downloader.active_temps():
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)
            for cand in self._inflight.values():
                self.reservations.release(cand.size)
            self._inflight.clear()
            with contextlib.suppress(Exception):
                self.reservations.publish()
                self.store.set_backpressure(False)


def _install_signals(stop: threading.Event) -> list[tuple[signal.Signals, Any]]:
    """SIGTERM/SIGINT set the stop flag (only possible on the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return []
    old: list[tuple[signal.Signals, Any]] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if not stop.is_set():
            log.info("signal %d: stopping (finishing or abandoning downloads in flight)", signum)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        old.append((sig, signal.signal(sig, handler)))
    return old


LOCK_NAME = "sampler.lock"


def _lock_cache(cache: Path) -> int:
    """Hold the cache's sampler lock for the life of the process (the kernel drops it on exit,
    kill -9 included). Two samplers on one cache would each count only their own reservations and
    the second one's recovery would delete the first one's downloads in flight."""
    fd = os.open(cache / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
        os.close(fd)
        raise ConfigError(
            f"--cache: {cache} is in use by another epochfs sample (pid {holder}); "
            f"one sampler per cache"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _check_identity(store: Store, settings: SamplerSettings) -> None:
    """A cache belongs to one (remote, seed, shard): its ranks and samples were made for them."""
    wanted = {
        Meta.SAMPLER_REMOTE: ("--remote", settings.remote),
        Meta.SAMPLER_SEED: ("--seed", str(settings.seed)),
        Meta.SAMPLER_SHARD: ("--shard-index/--shard-count", f"{settings.shard_index}/{settings.shard_count}"),
    }
    for key, (flag, value) in wanted.items():
        have = store.meta(key)
        if have is None:
            store.set_meta(key, value)
        elif have != value:
            raise ConfigError(
                f"{flag}: the cache {settings.cache} was filled with {have!r}, not {value!r}; "
                f"use another --cache (or remove this one)"
            )


def _check_capacity(settings: SamplerSettings, report: CatalogReport) -> None:
    if report.added == 0 and report.too_large > 0:
        limit_flag = (
            "--max-object-size"
            if settings.max_object_size is not None and settings.object_limit == settings.max_object_size
            else "--capacity"
        )
        raise ConfigError(
            f"{limit_flag}: every object of this shard is larger than the object limit "
            f"{format_size(settings.object_limit)} (capacity {format_size(settings.capacity)}, "
            f"headroom {settings.headroom:.0%}); the smallest is {format_size(report.smallest_refused)}"
        )


def run_sample(settings: SamplerSettings) -> int:
    """The ``epochfs sample`` command: 0 after a clean stop, 2 for bad settings, 1 on disk failure."""
    stop = threading.Event()
    old_signals = _install_signals(stop)
    try:
        store = Store(settings.cache, create=True)
    except Exception:
        for sig, h in old_signals:
            signal.signal(sig, h)
        raise
    remote: Remote | None = None
    lock_fd: int | None = None
    try:
        lock_fd = _lock_cache(settings.cache)
        _check_identity(store, settings)
        log.info("%s", store.recover())
        store.configure(
            Policy(
                capacity=settings.capacity,
                keep_epochs=settings.keep_epochs,
                min_samples=settings.min_samples,
                headroom=settings.headroom,
                in_use_seconds=settings.in_use_seconds,
                schedule=settings.schedule,
            )
        )
        try:
            remote = open_remote(
                settings.remote,
                endpoint_url=settings.endpoint_url,
                index_url=settings.index_url,
                concurrency=settings.concurrency,
                read_timeout=_env_float("EPOCHFS_READ_TIMEOUT", 30.0),
            )
            report = build_catalog(
                store,
                remote,
                seed=settings.seed,
                shard_index=settings.shard_index,
                shard_count=settings.shard_count,
                object_limit=settings.object_limit,
                stop=stop,
            )
        except RemoteError as e:
            raise ConfigError(f"--remote: {e}") from None
        if stop.is_set():
            return 0
        _check_capacity(settings, report)
        sampler = Sampler(
            store=store,
            remote=remote,
            settings=settings,
            stop=stop,
            progress_every=_env_float("EPOCHFS_PROGRESS_SECONDS", 5.0),
        )
        try:
            sampler.run()
        except LocalWriteError as e:
            log.error("the node volume failed: %s", e)
            return 1
        log.info("stopped cleanly")
        return 0
    finally:
        if remote is not None:
            remote.close()
        store.close()
        if lock_fd is not None:
            os.close(lock_fd)
        for sig, h in old_signals:
            signal.signal(sig, h)


__all__ = ["Sampler", "run_sample"]
