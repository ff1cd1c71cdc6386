"""The :class:`Supervisor` itself: its settings and children, the loop, signals and shutdown.

The loop is the one place that orders the other parts (:mod:`.children`, :mod:`.watch`,
:mod:`.health`, :mod:`.observability`, mixed into :class:`Supervisor`): check the mount point,
open the store, start the endpoints and the children, then every ``tick`` reap and restart, watch
the view, rescan the served counter and, every couple of seconds, save totals, tell the
reporter and reap orphans (:mod:`.reaper`); on a signal stop in order. Kept apart so that the
order is read in one screen.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import IO, Any

from epochfs.fuse import mounting
from epochfs.fuse.errors import MountError
from epochfs.sidecar import config, kube, samplerlock
from epochfs.sidecar.config import (
    ConfigError,
    MountSettings,
    PublishSettings,
    SamplerSettings,
    SidecarSettings,
)
from epochfs.sidecar.signals import set_from_handler
from epochfs.sidecar.store import Meta, NoRoom, Store, StoreError, publisherlock
from epochfs.sidecar.supervisor.children import Child
from epochfs.sidecar.supervisor.health import HealthChecks
from epochfs.sidecar.supervisor.observability import STATE_FILE_NAME, Observability, load_reporter
from epochfs.sidecar.supervisor.reaper import is_subreaper, reap_orphans, set_subreaper
from epochfs.sidecar.supervisor.roomwait import RoomWait

log = logging.getLogger("epochfs.supervisor")

class Supervisor(HealthChecks, Observability):
    """Runs the sidecar until a signal; see the package docstring. Keyword-only, validated up front.

    Its parts are mixins: :class:`~.children.ChildProcesses` (start, reap, restart, stop, the
    backoff), :class:`~.watch.MountWatch` (the probe, remount, the publisher's liveness),
    :class:`~.health.HealthChecks` (``/healthz``, ``/readyz``) and
    :class:`~.observability.Observability` (metrics, endpoints, served counter, reporter)."""

    SAMPLER_STOP_GRACE = 5.0
    VIEW_STOP_GRACE = 20.0
    """Seconds the view is given to exit after SIGTERM before it is killed. The FUSE server's exit
    waits for the kernel to free every dentry and inode it caches for the mount: that runs inside
    the server's unmount (``umount2``), takes ~2-4 s per million files listed (docs/mount.md,
    "Stopping"), and a SIGKILL cannot cut it short (the process dies only when the call returns),
    so a kill saves nothing and only skips the server's clean end (the index closed, the read-only
    bind removed). 5 + 20 s stays inside Kubernetes' default 30 s grace (the chart gives 60 s)."""

    def __init__(
        self,
        *,
        settings: SidecarSettings,
        python: str = sys.executable,
        log_level: str = "INFO",
        stat_timeout: float = 2.0,
        tick: float = 0.25,
        sink: IO[str] | None = None,
        http_host: str = "::",
    ) -> None:
        if stat_timeout <= 0 or tick <= 0:
            raise ValueError("stat_timeout and tick must be positive")
        self.settings = settings
        self.python = python
        self.log_level = log_level
        self.stat_timeout = stat_timeout
        self.tick = tick
        self.sink = sink if sink is not None else sys.stderr
        self.http_host = http_host
        """Where the endpoints listen. ``"::"`` (:data:`~epochfs.sidecar.endpoints.ALL_ADDRESSES`) is
        every IPv6 and IPv4 address, so the kubelet's probes reach an IPv6-only pod as well; IPv4
        only where the kernel has no IPv6."""
        self.mount = Path(settings.mount).absolute()
        self.cache = Path(settings.cache).absolute()
        sampler_settings = SamplerSettings(
            **{f: getattr(settings, f) for f in SamplerSettings.__dataclass_fields__}
        )
        mount_settings = MountSettings(
            cache=settings.cache, mount=settings.mount, link_root=settings.link_root,
            warm_files=settings.warm_files, fuse_api=settings.fuse_api,
        )
        self.sampler = Child("sampler", ["sample"],  # the view: the folder view's lock holds it back
                             {**config.to_env(sampler_settings, SamplerSettings),
                              publisherlock.VIEW_ENV: settings.view}, stop_on_refusal=True)
        self.fuse = Child("fuse", ["mount"], config.to_env(mount_settings, MountSettings),
                          stop_on_refusal=True, max_backoff=self.REMOUNT_BACKOFF_MAX)
        self.folder_view = settings.view == "folder"
        publish_settings = PublishSettings(cache=settings.cache, mount=settings.mount,
                                           link_root=settings.link_root)
        self.publisher = Child("publisher", ["publish"], config.to_env(publish_settings, PublishSettings))
        self.view = self.publisher if self.folder_view else self.fuse
        """The child that serves the view: the FUSE server or the folder publisher."""
        self._signals = 0
        self._stop = threading.Event()
        self._children_lock = threading.RLock()
        self._mounted = False
        self._last_probe = "not mounted"
        self._probe_failures = 0
        self._store: Store | None = None
        self._cache_lock = -1
        """The descriptor of the cache's sidecar lock while :meth:`run` runs (:meth:`_hold_cache`)."""
        self._multiproc_dir: Path | None = None
        self._metrics: Any = None
        self._endpoints: list[Any] = []
        self._counter: Any = None
        self._reporter: kube.Reporter | None = None
        self._seen: dict[str, Any] = {}
        self._step_logged: dict[str, float] = {}

    # ------------------------------------------------------------------ signals
    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals == 1:
            name = signal.Signals(signum).name
            set_from_handler(self._stop,
                             then=lambda: log.info("%s: stopping (send again to exit at once)", name))
            return
        log.warning("second signal: killing children and exiting now")
        for child in (self.sampler, self.view):
            if child.proc is not None and child.proc.poll() is None:
                child.proc.kill()
        if not self.folder_view:
            with contextlib.suppress(Exception):
                mounting.lazy_unmount(self.mount)
                self._unmount_link_root()
        os._exit(128 + signum)

    NO_ROOM_LOG_EVERY = 60.0
    """Seconds between the lines of a start waiting for room on the cache's volume."""

    def _open_store(self) -> Store | None:
        """The cache's index, waiting while the volume is too full to open it (another tenant
        filled the node volume before this start): the start goes on once there is room, where an
        exit would be a crash loop of the whole container. Meanwhile its ports answer that it waits
        (:class:`~.roomwait.RoomWait`), and a stop signal ends the wait (None). A cache that cannot
        be used otherwise is a bad setting (exit 2; :meth:`_run` writes it to the termination log
        as the start's other refusals: an index a newer epochfs wrote, which ``kubectl describe
        pod`` names)."""
        logged = -self.NO_ROOM_LOG_EVERY
        waiting = RoomWait(host=self.http_host, health_port=self.settings.health_port,
                           metrics_port=self.settings.metrics_port, cache=str(self.cache))
        try:
            while True:
                try:
                    return Store(self.cache, create=True)
                except NoRoom as e:
                    waiting.serve(str(e))  # the probes and epochfs_disk_full while it lasts
                    if time.monotonic() - logged >= self.NO_ROOM_LOG_EVERY:
                        log.warning("%s", e)
                        logged = time.monotonic()
                    if self._stop.wait(1.0):
                        return None
                except StoreError as e:
                    raise ConfigError(f"--cache: {e}") from None
        finally:
            waiting.close()  # before the real endpoints bind the same ports

    def _record_report_url(self) -> None:
        """Record the health port's client-report URL in the index (:data:`Meta.REPORT_URL`), which
        the views show in status.json: a trainer without ``EPOCHFS_REPORT_URL`` finds this sidecar
        on any ``--health-port`` through the mount it reads. On the loopback, which the trainer's
        container shares in the pod. A failure (the index busy) is said once and tried again every
        couple of seconds, as after an index rebuild (:meth:`_saved_totals` finds the totals lost)."""
        from epochfs.sidecar.endpoints import CLIENT_REPORT_PATH

        assert self._store is not None and self._endpoints
        host = "127.0.0.1" if self.http_host in ("", "::", "0.0.0.0") else self.http_host
        host = f"[{host}]" if ":" in host else host
        url = f"http://{host}:{self._endpoints[0].port}{CLIENT_REPORT_PATH}"
        try:
            self._store.set_meta(Meta.REPORT_URL, url)
        except Exception as e:  # the index busy or damaged: the sampler's business, not ours
            self._seen["report_url"] = None
            if self._seen.get("report_url_error") != str(e):
                self._seen["report_url_error"] = str(e)
                log.warning("recording the report URL in the index: %s (tried again)", e)
            return
        self._seen["report_url"] = url

    def _forget_report_url(self) -> None:
        """Remove the report URL from the index once the endpoints are closed: a view of this cache
        served later without this sidecar (``epochfs mount``) must not name a port that another
        sidecar may listen on by then."""
        assert self._store is not None
        try:
            self._store.set_meta(Meta.REPORT_URL, None)
        except Exception as e:  # a full or failing volume: the trainers' 409 check still holds
            log.warning("removing the report URL from the index: %s", e)
        self._seen["report_url"] = None

    # ------------------------------------------------------------------ the loop
    def run(self) -> int:
        """Own the cache, check, start, supervise until a signal, stop cleanly. Returns the exit
        status."""
        self._hold_cache()
        try:
            return self._run()
        finally:
            os.close(self._cache_lock)  # last: the cache's metric files and state are gone by now

    def _hold_cache(self) -> None:
        """Take the cache's sidecar lock (:func:`~epochfs.sidecar.samplerlock.hold_sidecar`) before
        anything else: a second sidecar on this cache is refused here (exit 2, one line naming the
        running one's pid, also in the termination log), before it empties the running one's
        metric files, detaches a mount or starts a sampler that could take the cache from it."""
        try:
            self.cache.mkdir(parents=True, exist_ok=True)  # made by the CLI's check already
            self._cache_lock = samplerlock.hold_sidecar(self.cache)
        except OSError as e:
            raise ConfigError(f"--cache {self.cache}: cannot lock it: {e.strerror or e}") from None
        except ConfigError as e:
            write_termination_message(self.settings.termination_log, f"epochfs sidecar: {e}")
            raise

    def _run(self) -> int:
        if self.folder_view:
            self._check_folder()
        else:
            self._check_mount()  # what the FUSE server would refuse; dead mounts are detached
        # The handlers before the wait for room: a pod deleted while its start waits stops with
        # status 0, as a running sidecar does, not killed by the signal.
        previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
        for s in previous:
            signal.signal(s, self._on_signal)
        try:
            store = self._check_at_start(self._open_store)  # its refusal in the termination log too
            if store is None:
                log.info("stopped while waiting for room on the cache's volume")
                return 0
            self._store = store
            return self._serve(store)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _serve(self, store: Store) -> int:
        """From an open store: the endpoints, the children and the loop, until a signal."""
        try:
            self._check_link_root(store.objects_dir)
        except MountError:
            store.close()
            raise
        if not self.folder_view:  # a cache that had a folder view: no sampler waits for a publisher
            publisherlock.forget(self.cache)
        # Before the first child: its orphans (the sampler's listing child when the sampler
        # dies) then come to this process to be reaped, as they would to PID 1 in the image.
        was_subreaper = os.getpid() == 1 or is_subreaper()  # PID 1 gets every orphan already
        subreaper = was_subreaper or set_subreaper(True)
        try:
            try:
                self._setup_observability()
            except ConfigError as e:  # a port in use: kubectl describe pod says why, too
                write_termination_message(self.settings.termination_log, f"epochfs sidecar: {e}")
                raise
            # epochfs_disk_full while the sampler cannot start for room: it sets no gauge then.
            self._metrics.children_metrics.waiting_for_room(lambda: self.waiting_for_room(self.sampler))
            self._record_report_url()  # before the view starts: its first status.json names it
            self._reporter = load_reporter(self.settings, self.mount)
            self._start(self.sampler)
            self._start(self.view)
            last_periodic = 0.0
            refused: str | None = None
            refuser = "sampler"
            while not self._stop.wait(self.tick):
                if self._reaped(self.sampler) and (refused := self.refused(self.sampler)) is not None:
                    break
                self._restart_due(self.sampler)
                self._watch_index_damages(self.sampler)  # a good run ends the count of damages
                self._contained(self._watch_publisher if self.folder_view else self._watch_mount)
                if (refused := self._view_refused()) is not None:  # as the sampler's: no restart
                    refuser = "FUSE server" if self.view is self.fuse else "folder publisher"
                    break
                self._restart_due(self.view)
                self._save_state()  # for epochfs status: the sampler retrying, or nothing
                if self._counter is not None:
                    self._counter.rescan()  # a stat of objects/; its 256 entries when it changed
                if time.monotonic() - last_periodic >= 2.0:
                    last_periodic = time.monotonic()
                    self._periodic()
                    if not self._seen.get("report_url"):  # its record failed, or an index rebuilt lost it
                        self._record_report_url()
                    self._safe(self._reap_orphans)  # a zombie costs a pid, not CPU: every 2 s
            status = self._shutdown()
            if refused is not None:
                write_termination_message(self.settings.termination_log, refused)
                raise ConfigError(f"the {refuser} refused its settings, so the sidecar stops: {refused}")
            return status
        finally:
            self._cleanup()
            if subreaper and not was_subreaper:
                set_subreaper(False)

    STEP_LOG_EVERY = 60.0
    """Seconds between the lines of a loop step that keeps failing (:meth:`_contained`)."""

    def _contained(self, step: Callable[[], None]) -> None:
        """Run a step of the loop that forks, starts threads or touches the node volume (the view's
        watch: its probe's thread, the unmount command, the publisher's status file). A thread
        or process that cannot be had now (a pod's pids limit) or an I/O error is the node's
        state, not a bug: logged (once a minute while it lasts) and the step is tried again the
        next tick, the rest of the sidecar going on. Anything else still ends the supervisor."""
        try:
            step()
        except (OSError, RuntimeError) as e:
            if isinstance(e, RuntimeError) and "can't start new thread" not in str(e):
                raise
            name, now = getattr(step, "__name__", str(step)), time.monotonic()
            last = self._step_logged.get(name)
            if last is None or now - last >= self.STEP_LOG_EVERY:
                self._step_logged[name] = now
                log.error("%s failed (%s: %s); trying again while it lasts", name.lstrip("_"),
                          type(e).__name__, e)

    def _reap_orphans(self) -> None:
        """Wait for the zombies among this process's children that it did not start (see
        :mod:`.reaper`); its own children's exits are left to their Popen."""
        # Children Popen has not waited for yet: one it has (exited, its restart not due) holds no
        # pid, which an orphan may then have.
        known = {c.proc.pid for c in (self.sampler, self.fuse, self.publisher)
                 if c.proc is not None and c.proc.returncode is None}
        for orphan in reap_orphans(known):
            log.info("reaped orphan %s", orphan.describe())

    def _shutdown(self) -> int:
        """Stop the sampler, then the view, then make sure nothing stays mounted (the folder view
        is left as published: readers keep reading, and the next start recovers from it)."""
        self._terminate(self.sampler, timeout=self.SAMPLER_STOP_GRACE)
        self._terminate(self.view, timeout=self.VIEW_STOP_GRACE)
        if not self.folder_view and mounting.find_mount(self.mount) is not None:
            log.info("unmounting %s lazily", self.mount)
            mounting.lazy_unmount(self.mount)
        self._unmount_link_root()
        self._mounted = False
        self._periodic()
        log.info("stopped")
        return 0

    def _cleanup(self) -> None:
        for child in (self.sampler, self.view):
            if child.proc is not None and child.proc.poll() is None:
                child.proc.kill()
                child.proc.wait()
        if not self.folder_view:
            with contextlib.suppress(Exception):
                mounting.lazy_unmount(self.mount)
                self._unmount_link_root()
        if self._counter is not None:
            self._counter.stop()
        if self._reporter is not None:
            self._safe(self._reporter.close)
        for ep in self._endpoints:
            ep.stop()
        if self._store is not None:
            if self._seen.get("retrying") is not None:  # as the state file, below
                self._save_retrying(None, None)
            self._forget_report_url()
            self._store.close()
        if self._multiproc_dir is not None:
            shutil.rmtree(self._multiproc_dir, ignore_errors=True)
        if self._seen.get("state") is not None:  # nothing is retrying once the supervisor is gone
            with contextlib.suppress(OSError):
                (self.cache / STATE_FILE_NAME).unlink(missing_ok=True)


def write_termination_message(path: Path, text: str) -> None:
    """Leave ``text`` where Kubernetes shows why the container stopped (``--termination-log``,
    ``terminationMessagePath``'s default): only where that file exists, in a pod; nothing
    elsewhere."""
    if path.exists():
        with contextlib.suppress(OSError):
            path.write_text(text[:4096] + "\n")


def run_sidecar(settings: SidecarSettings) -> int:
    """Entry point of ``epochfs sidecar`` (see :class:`Supervisor`)."""
    level = logging.getLevelName(logging.getLogger().getEffectiveLevel())
    return Supervisor(settings=settings, log_level=str(level)).run()
