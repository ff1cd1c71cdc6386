"""``epochfs sidecar``: a small supervisor over two child processes, the sampler and the view.

The view is the FUSE server (``--view fuse``, the default) or the folder publisher (``--view
folder``: the same layout written as plain files, no mount and no privilege; docs/folderview.md).
The publisher is a child process like the FUSE server, not a thread here, for the same reasons:
a crash or a stall of it (writing 100k symlinks) never delays the probes or the endpoints, it is
restarted alone with backoff, and ``kill -9`` of it is a case its recovery handles.

Why child processes: the two share nothing but the store on the node volume, so a crash of one
never takes the other down, and each can be restarted alone. The supervisor

* checks the mount point first (missing, not a folder, not empty, mounted by something alive:
  :class:`ConfigError`, exit 2; a dead FUSE mount left by a crash is lazily unmounted);
* runs ``epochfs sample`` and ``epochfs mount`` with their settings in ``EPOCHFS_*`` variables
  (``config.to_env``; never on a command line, which any user can read), their
  output on its stderr prefixed ``[sampler]`` / ``[fuse]``;
* restarts a dead sampler with exponential backoff while the mount keeps serving;
* notices a dead FUSE server or a dead mount (ENOTCONN, or a stat that hangs past a deadline),
  lazily unmounts and mounts again, never stacking mounts;
* on SIGTERM/SIGINT stops the sampler, unmounts (lazily if busy) and exits 0; a second signal kills
  the children, detaches the mount and exits at once;
* serves ``/healthz``, ``/readyz``, ``/metrics`` and the torch client's report endpoint, counts
  samples served from opens of object files (``served.py``), and tells the Kubernetes reporter
  (``epochfs.sidecar.kube``: Events and a status annotation; a no-op outside a cluster) about cuts,
  backpressure, remote errors and remounts.

Children get ``PR_SET_PDEATHSIG`` so that they die with the supervisor even after a ``kill -9``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import IO, Any

from epochfs.fuse import mounting
from epochfs.sidecar import config, kube
from epochfs.sidecar.config import (
    ConfigError,
    MountSettings,
    PublishSettings,
    SamplerSettings,
    SidecarSettings,
)
from epochfs.sidecar.store import Meta, Stats, Store, StoreError

log = logging.getLogger("epochfs.supervisor")

METRICS_DIR_NAME = "metrics"
"""Folder of the cache where the children write their Prometheus multiprocess files."""

# Child bootstrap: ask the kernel to SIGTERM us when the supervisor dies, then run the CLI. Done in
# the child rather than with preexec_fn, which is unsafe once the supervisor has threads.
_CHILD_BOOT = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM)\n"
    "if os.getppid() != int(sys.argv[1]): sys.exit(1)\n"
    "from epochfs.sidecar.cli import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)


_stuck_probes: dict[str, threading.Thread] = {}
_stuck_lock = threading.Lock()


def probe(path: Path, *, timeout: float) -> str:
    """Stat and list ``path`` within ``timeout`` seconds: "ok", "dead" (ENOTCONN), "hung" or
    "error: ...". A stat of a hung FUSE server would block, so it runs in a daemon thread left
    behind if it never returns; while one is still stuck on ``path``, later probes answer "hung" at
    once instead of leaving one more thread each (probes come every few seconds)."""
    key = str(path)
    with _stuck_lock:
        stuck = _stuck_probes.get(key)
        if stuck is not None and stuck.is_alive():
            return "hung"
    result: list[str] = []

    def run() -> None:
        try:
            os.stat(path)
            os.listdir(path)
            result.append("ok")
        except OSError as e:
            dead = e.errno in (errno.ENOTCONN, errno.ECONNABORTED)
            result.append("dead" if dead else f"error: {e.strerror}")

    t = threading.Thread(target=run, name="epochfs-probe", daemon=True)
    t.start()
    t.join(timeout)
    if result:
        return result[0]
    with _stuck_lock:
        _stuck_probes[key] = t
    return "hung"


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


@dataclass
class Child:
    """One supervised child process and its restart bookkeeping."""

    name: str
    argv: list[str]
    settings_env: dict[str, str | None]
    """Its settings as ``EPOCHFS_*`` variables (None: unset), from ``config.to_env``."""
    proc: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0
    backoff: float = 0.0
    next_start: float = 0.0
    last_exit: int | None = None
    log_thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None


def _pump(name: str, stream: IO[bytes], sink: IO[str]) -> None:
    """Copy a child's output to the supervisor's stderr, one prefixed line at a time."""
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace").rstrip("\n")
        with contextlib.suppress(ValueError, OSError):
            sink.write(f"[{name}] {line}\n")
            sink.flush()
    stream.close()


class Supervisor:
    """Runs the sidecar until a signal; see the module docstring. Keyword-only, validated up front."""

    BACKOFF_MIN = 0.5
    BACKOFF_MAX = 30.0
    STABLE_AFTER = 30.0
    """A child that ran this long before dying restarts at the minimum backoff again."""
    UNHEALTHY_CRASHES = 5
    """Consecutive quick sampler crashes after which /healthz fails (the pod gets restarted)."""

    def __init__(
        self,
        *,
        settings: SidecarSettings,
        python: str = sys.executable,
        log_level: str = "INFO",
        stat_timeout: float = 2.0,
        tick: float = 0.25,
        sink: IO[str] | None = None,
        http_host: str = "0.0.0.0",
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
        self.mount = Path(settings.mount).absolute()
        self.cache = Path(settings.cache).absolute()
        sampler_settings = SamplerSettings(
            **{f: getattr(settings, f) for f in SamplerSettings.__dataclass_fields__}
        )
        mount_settings = MountSettings(
            cache=settings.cache, mount=settings.mount, link_root=settings.link_root,
            warm_files=settings.warm_files,
        )
        self.sampler = Child("sampler", ["sample"], config.to_env(sampler_settings, SamplerSettings))
        self.fuse = Child("fuse", ["mount"], config.to_env(mount_settings, MountSettings))
        self.folder_view = settings.view == "folder"
        publish_settings = PublishSettings(cache=settings.cache, mount=settings.mount,
                                           link_root=settings.link_root)
        self.publisher = Child("publisher", ["publish"], config.to_env(publish_settings, PublishSettings))
        self.view = self.publisher if self.folder_view else self.fuse
        """The child that serves the view: the FUSE server or the folder publisher."""
        self._signals = 0
        self._stop = threading.Event()
        self._mounted = False
        self._last_probe = "not mounted"
        self._probe_failures = 0
        self._store: Store | None = None
        self._multiproc_dir: Path | None = None
        self._metrics: Any = None
        self._endpoints: list[Any] = []
        self._counter: Any = None
        self._reporter: kube.Reporter | None = None
        self._seen: dict[str, Any] = {}
        self._reads_noted: dict[int, float] = {}

    # ------------------------------------------------------------------ children
    def _env(self, child: Child) -> dict[str, str]:
        env = dict(os.environ)
        for name, value in child.settings_env.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        if self._multiproc_dir is not None:
            env["PROMETHEUS_MULTIPROC_DIR"] = str(self._multiproc_dir)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _start(self, child: Child) -> None:
        # -P: never import from the working directory (an epochfs/ folder there would shadow the
        # installed package).
        argv = [self.python, "-P", "-c", _CHILD_BOOT, str(os.getpid()), "--log-level", self.log_level,
                *child.argv]
        child.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env=self._env(child), start_new_session=True,
        )
        child.started_at = time.monotonic()
        assert child.proc.stdout is not None
        child.log_thread = threading.Thread(
            target=_pump, args=(child.name, child.proc.stdout, self.sink),
            name=f"epochfs-log-{child.name}", daemon=True,
        )
        child.log_thread.start()
        if self._metrics is not None:
            self._metrics.child_up.labels(child=child.name).set(1)
        log.info("started %s (pid %d)", child.name, child.proc.pid)

    def _reaped(self, child: Child) -> bool:
        """True once when ``child`` has exited; records it and schedules the restart."""
        if child.proc is None or child.proc.poll() is None:
            return False
        code = child.proc.returncode
        child.last_exit = code
        ran = time.monotonic() - child.started_at
        if self._multiproc_dir is not None:
            from epochfs.sidecar.metrics import forget_process

            forget_process(child.proc.pid, self._multiproc_dir)
        if self._metrics is not None:
            self._metrics.child_up.labels(child=child.name).set(0)
        child.proc = None
        if ran >= self.STABLE_AFTER:
            child.backoff = 0.0
        child.backoff = min(self.BACKOFF_MAX, max(self.BACKOFF_MIN, child.backoff * 2))
        child.next_start = time.monotonic() + child.backoff
        log.warning("%s exited with status %s after %.1fs; restarting in %.1fs",
                    child.name, code, ran, child.backoff)
        return True

    def _restart_due(self, child: Child) -> None:
        if child.proc is None and time.monotonic() >= child.next_start and not self._stop.is_set():
            child.restarts += 1
            if self._metrics is not None:
                self._metrics.child_restarts.labels(child=child.name).inc()
            self._start(child)

    def _terminate(self, child: Child, *, timeout: float) -> None:
        proc = child.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop within %.0fs; killing it", child.name, timeout)
                proc.kill()
                proc.wait()
        if child.log_thread is not None:
            child.log_thread.join(timeout=2)
        child.proc = None

    # ------------------------------------------------------------------ the mount
    def _fuse_mounted(self) -> bool:
        entry = mounting.find_mount(self.mount)
        return entry is not None and entry.fstype.startswith("fuse")

    def _unmount_link_root(self) -> None:
        """The FUSE server removes the read-only bind it made, but a restarted server reuses the
        one a killed server left and so does not own it: the supervisor removes it at the end."""
        if self.settings.link_root is None:
            link_root = self.cache / mounting.DEFAULT_LINK_ROOT_NAME
            if mounting.find_mount(link_root) is not None:
                mounting.lazy_unmount(link_root, any_kind=True)

    def _remount(self, reason: str) -> None:
        """The FUSE server died or its mount is dead: kill, detach, start again (no stacking)."""
        log.warning("FUSE view lost (%s): unmounting lazily and mounting again", reason)
        self._mounted = False
        if self._metrics is not None:
            self._metrics.mounted.set(0)
        proc = self.fuse.proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                # Stuck in the kernel on its own mount: it dies once the mount is detached, or
                # never; either way a new server must not wait for it.
                log.error("FUSE server pid %d did not die after SIGKILL (stuck in the kernel); "
                          "detaching its mount and starting a new one", proc.pid)
                mounting.lazy_unmount(self.mount)
                self.fuse.proc = None
                self.fuse.last_exit = None
                self.fuse.next_start = time.monotonic()
        self._reaped(self.fuse)
        if not mounting.lazy_unmount(self.mount):
            log.error("lazy unmount of %s failed; retrying before the next start", self.mount)
        self.fuse.next_start = time.monotonic() + min(self.fuse.backoff, 2.0)
        if self._reporter is not None:
            self._safe(self._reporter.on_remount)

    def _watch_mount(self) -> None:
        if self._reaped(self.fuse):
            self._remount(f"FUSE server exited with status {self.fuse.last_exit}")
            return
        if not self.fuse.alive:
            return
        present = self._fuse_mounted()
        if not present:
            if self._mounted:
                self._remount("mount disappeared")
            return
        state = probe(self.mount, timeout=self.stat_timeout)
        self._last_probe = state
        if state == "ok":
            if not self._mounted:
                log.info("mounted %s", self.mount)
            self._mounted = True
            if self._metrics is not None:
                self._metrics.mounted.set(1)
            self._probe_failures = 0
            return
        self._probe_failures += 1
        if state == "dead" or self._probe_failures >= 3:
            self._remount(f"mount answered {state}")

    # ------------------------------------------------------------------ the folder view
    def _check_folder(self) -> None:
        """The folder view's folder: a folder (what a previous run published stays and is
        recovered) or a missing one whose parent exists."""
        if self.mount.exists() and not self.mount.is_dir():
            raise ConfigError(f"--mount: {self.mount} exists and is not a folder")
        if not self.mount.parent.is_dir():
            raise ConfigError(f"--mount: the parent of {self.mount} is not a folder")

    def _watch_publisher(self) -> None:
        """Restart a dead publisher with backoff (what it published stays readable meanwhile);
        "mounted" is "published": the publisher runs and status.json is there."""
        self._reaped(self.publisher)
        published = self.publisher.alive and (self.mount / ".epochfs" / "status.json").is_file()
        if published != self._mounted:
            log.info("folder view %s %s", self.mount, "published" if published else "not published")
        self._mounted = published
        if self._metrics is not None:
            self._metrics.mounted.set(int(published))

    def _client_reads(self, epochs: tuple[int, ...]) -> None:
        """The torch client reads these epochs (its report says so): record a read of each, at
        most one per epoch per 10 s, which keeps them pinned as a lookup on the FUSE view does;
        with the folder view it is the only sign of a reader."""
        now = time.monotonic()
        for n in epochs:
            if now - self._reads_noted.get(n, -1e18) >= 10.0 and self._store is not None:
                self._reads_noted[n] = now
                try:
                    self._store.record_read(n)
                except Exception as e:
                    log.warning("recording a read of epoch %d: %s", n, e)

    # ------------------------------------------------------------------ health
    def health(self) -> tuple[bool, dict[str, Any]]:
        """Alive: the FUSE server runs and the mount answers a stat within the deadline; the
        sampler runs, or is being restarted after fewer than UNHEALTHY_CRASHES quick crashes."""
        answer = probe(self.mount, timeout=self.stat_timeout)
        sampler_ok, view_ok = (c.alive or c.backoff < self.BACKOFF_MIN * 2 ** (self.UNHEALTHY_CRASHES - 1)
                               for c in (self.sampler, self.view))
        ok = (view_ok if self.folder_view else self.fuse.alive) and answer == "ok" and sampler_ok
        return ok, {"mount": answer, "children": self._children_doc()}

    def ready(self) -> tuple[bool, dict[str, Any]]:
        """Ready: mounted (folder view: published), and epoch 0 exists or could be cut now."""
        stats = self._stats()
        cuttable = stats is not None and self._epoch0_ready(stats.latest_epoch)
        ok = self._mounted and (self.folder_view or self._fuse_mounted()) and cuttable
        return ok, {
            "mounted": self._mounted,
            "epoch0": cuttable,
            "samples": 0 if stats is None else stats.samples,
        }

    def _epoch0_ready(self, latest_epoch: int | None) -> bool:
        """An epoch exists, or the first one could be cut now (the store's one cut condition; the
        first is 0, or the number after the high-water mark once an index was reset)."""
        if latest_epoch is not None:
            return True
        assert self._store is not None
        try:
            return self._store.cut_ready(self._store.next_epoch())
        except Exception as e:
            log.warning("store cut condition: %s", e)
            return False

    def _children_doc(self) -> dict[str, Any]:
        return {
            c.name: {"pid": c.pid, "alive": c.alive, "restarts": c.restarts, "last_exit": c.last_exit}
            for c in (self.sampler, self.view)
        }

    def _stats(self) -> Stats | None:
        if self._store is None:
            return None
        try:
            return self._store.stats()
        except Exception as e:
            log.warning("store stats: %s", e)
            return None

    # ------------------------------------------------------------------ periodic work
    @staticmethod
    def _safe(fn: Callable[..., Any], *args: Any) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("kube reporter call %s failed", getattr(fn, "__name__", fn))

    def _periodic(self) -> None:
        """Every couple of seconds: save the supervisor's totals, tell the reporter."""
        if self._store is None or self._metrics is None:
            return
        totals = self._metrics.totals()
        if totals != self._seen.get("totals"):
            try:
                self._store.set_meta(Meta.SIDECAR_TOTALS, json.dumps(totals, sort_keys=True))
                self._seen["totals"] = totals
            except Exception as e:
                log.warning("saving totals: %s", e)
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
        previous = self._seen.setdefault("skipped", stats.skipped_total)  # count from our start
        if stats.skipped_total > previous:
            self._seen["skipped"] = stats.skipped_total
            self._safe(rep.on_remote_errors, stats.skipped_total - previous)
        self._safe(rep.update_status, stats.to_json())

    # ------------------------------------------------------------------ signals
    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals += 1
        if self._signals == 1:
            log.info("%s: stopping (send again to exit at once)", signal.Signals(signum).name)
            self._stop.set()
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

    # ------------------------------------------------------------------ setup and the loop
    def _setup_observability(self) -> None:
        from prometheus_client import CollectorRegistry, disable_created_metrics

        from epochfs.sidecar import cutrequest, endpoints, metrics, served

        disable_created_metrics()
        # A fixed folder in the cache, emptied at every start: a supervisor killed with -9 leaves
        # its children's metric files behind, and the next one must not sum them (nor pile up
        # folders in /tmp).
        self._multiproc_dir = metrics.prepare_multiproc_dir(self.cache / METRICS_DIR_NAME)
        sidecar_metrics = metrics.SidecarMetrics(registry=CollectorRegistry(auto_describe=True))
        assert self._store is not None
        saved = self._store.meta(Meta.SIDECAR_TOTALS)
        if saved:
            with contextlib.suppress(ValueError, TypeError):
                sidecar_metrics.resume({k: float(v) for k, v in json.loads(saved).items()})
        self._metrics = sidecar_metrics
        registry = metrics.sidecar_registry(
            stats=self._stats, multiproc_dir=self._multiproc_dir, sidecar=sidecar_metrics
        )

        def on_report(r: endpoints.ClientReport) -> None:
            sidecar_metrics.add_client_report(samples=r.samples, nbytes=r.nbytes,
                                              wait_seconds=r.wait_seconds)
            self._client_reads(r.epochs)

        def on_cut(request: cutrequest.CutRequest) -> tuple[int, dict[str, Any]]:
            assert self._store is not None
            return cutrequest.answer(self._store, request)

        # /metrics on the health port, or only on --metrics-port when that is given and differs:
        # then a NetworkPolicy can open scrapes to Prometheus while the probes, the torch client's
        # reports and cut requests stay on a port only the pod and the kubelet reach.
        metrics_port = self.settings.metrics_port
        separate = metrics_port is not None and metrics_port != self.settings.health_port
        ports: list[tuple[int, Any, Any, Any]] = [
            (self.settings.health_port, None if separate else registry, on_report, on_cut)]
        if metrics_port is not None and separate:
            ports.append((metrics_port, registry, None, None))
        for port, reg, report, cut in ports:
            ep = endpoints.Endpoints(
                host=self.http_host, port=port, health=self.health, ready=self.ready,
                registry=reg, on_client_report=report, on_cut=cut,
            )
            ep.start()
            self._endpoints.append(ep)
            log.info("serving /healthz /readyz%s on port %d", " /metrics" if reg is not None else "", ep.port)
        self._counter = served.OpenCounter(
            objects_dir=self.cache / "objects",
            on_open=sidecar_metrics.add_served,
            on_lost=sidecar_metrics.served_lost_events.inc,
        )
        if not self._counter.start():
            self._counter = None

    def run(self) -> int:
        """Check, start, supervise until a signal, stop cleanly. Returns the exit status."""
        if self.folder_view:
            self._check_folder()
        else:
            mounting.check_mount_point(self.mount)  # dead mounts are detached, others refused
        try:
            self._store = Store(self.cache, create=True)
        except StoreError as e:
            raise ConfigError(f"--cache: {e}") from None
        previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
        for s in previous:
            signal.signal(s, self._on_signal)
        try:
            self._setup_observability()
            self._reporter = load_reporter(self.settings, self.mount)
            self._start(self.sampler)
            self._start(self.view)
            last_periodic = 0.0
            while not self._stop.wait(self.tick):
                self._reaped(self.sampler)
                self._restart_due(self.sampler)
                if self.folder_view:
                    self._watch_publisher()
                else:
                    self._watch_mount()
                self._restart_due(self.view)
                if self._counter is not None:
                    self._counter.rescan()  # a scandir of at most 256 entries
                if time.monotonic() - last_periodic >= 2.0:
                    last_periodic = time.monotonic()
                    self._periodic()
            return self._shutdown()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            self._cleanup()

    def _shutdown(self) -> int:
        """Stop the sampler, then the view, then make sure nothing stays mounted (the folder view
        is left as published: readers keep reading, and the next start recovers from it)."""
        self._terminate(self.sampler, timeout=5.0)
        self._terminate(self.view, timeout=3.0)
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
            self._store.close()
        if self._multiproc_dir is not None:
            shutil.rmtree(self._multiproc_dir, ignore_errors=True)


def run_sidecar(settings: SidecarSettings) -> int:
    """Entry point of ``epochfs sidecar`` (see :class:`Supervisor`)."""
    level = logging.getLevelName(logging.getLogger().getEffectiveLevel())
    return Supervisor(settings=settings, log_level=str(level)).run()
