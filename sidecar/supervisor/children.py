"""The supervisor's child processes: how one is started, reaped, restarted and stopped.

Separate from the mount watch and the endpoints because it is the one part that forks: the boot
snippet (``PR_SET_PDEATHSIG`` asked in the child, never with ``preexec_fn``, which is unsafe once
the supervisor has threads), the child's environment (settings as ``EPOCHFS_*`` variables, never
on a command line), the log pump that prefixes a child's output, and the restart backoff
(doubling from :attr:`ChildProcesses.BACKOFF_MIN` to :attr:`ChildProcesses.BACKOFF_MAX`, reset
after a child ran :attr:`ChildProcesses.STABLE_AFTER` seconds).

An exit is a *crash* or a *transient failure*: the sampler exits :data:`~epochfs.sidecar.config.EXIT_RETRY`
(75) when the remote cannot be reached at its start (a store still starting, an outage:
sampler/command.py), or when the cache's volume is too full for its start to write the index
(its reason then names ``--cache``: :func:`.childlog.no_room`), its last line ``epochfs sample:
<reason>``. Both restart with the same backoff, but only crashes count toward
:attr:`Child.crashes`, which ``/healthz`` reads (restarting the pod would not bring the remote
back, nor make room), and a transient failure's start again counts in
``epochfs_child_retries_total``, not in ``epochfs_child_restarts_total``, which
EpochfsChildRestarting reads (a remote late at the pod's start is no restart loop). A third
kind, the sampler's :data:`~epochfs.sidecar.config.EXIT_INDEX` (it met a damaged index while
running), is neither: the next start replaces the index in seconds, so it restarts after
:attr:`ChildProcesses.BACKOFF_MIN` and counts no crash (a liveness failure would restart the pod
for a damage the sidecar mends by itself; a start that cannot mend it exits 1, a crash), unless
it comes on every run: :attr:`Child.index` counts those exits in a row until a good run
(:mod:`.indexdamage`), ``/healthz`` fails at :data:`~epochfs.sidecar.config.INDEX_DAMAGES_UNHEALTHY`
and the restarts from then on take the crashes' backoff. The
reason of the last transient failure is kept (:attr:`Child.waiting`) for ``/readyz`` and
``epochfs status`` (:meth:`ChildProcesses.retry_note`), until a run proves stable or ends another way.
Two failures are the node's, never a stop: a start that gets no process or thread (a pod's pids
limit) is no run, tried again after the backoff; an exit 2 refusing ``--cache``, which the
sidecar's own start found usable, is the volume failing under it, or another sampler holding the
cache's lock: a crash.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from epochfs.sidecar.config import EXIT_INDEX, EXIT_RETRY, INDEX_DAMAGES_UNHEALTHY
from epochfs.sidecar.supervisor.childlog import no_room, pump_log, volume_refusal, waiting_words
from epochfs.sidecar.supervisor.indexdamage import IndexDamages
from epochfs.sidecar.supervisor.reaper import exit_words

log = logging.getLogger("epochfs.supervisor")

# Child bootstrap: ask the kernel to SIGTERM us when the supervisor dies, allocate the metric files
# (metrics_files: a write into a hole of a full volume is a SIGBUS), then run the CLI. Done in
# the child rather than with preexec_fn, which is unsafe once the supervisor has threads.
_CHILD_BOOT = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM)\n"
    "if os.getppid() != int(sys.argv[1]): sys.exit(1)\n"
    "from epochfs.sidecar.metrics_files import reserve_or_warn\n"
    "reserve_or_warn()\n"
    "from epochfs.sidecar.cli import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)

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
    last_ran: float = 0.0
    """Seconds its last run lasted."""
    last_error: str = ""
    """Its last ``epochfs <command>: ...`` line: the reason the CLI gives when it exits 2."""
    crashes: int = 0
    """Quick exits in a row that were not transient failures (``/healthz`` fails at
    :attr:`~epochfs.sidecar.supervisor.HealthChecks.UNHEALTHY_CRASHES`); reset by a stable run."""
    waiting: str = ""
    """``remote unreachable: <reason>`` (``disk full: <reason>`` when :attr:`no_room`) while the
    last exit was a transient failure and no run has proved stable since: what /readyz and
    ``epochfs status`` say (:meth:`ChildProcesses.retry_note`)."""
    no_room: bool = False
    """The last transient failure was the cache's volume too full for the start: ``epochfs_disk_full``
    is 1 while it waits (:meth:`ChildProcesses.waiting_for_room`)."""
    index: IndexDamages = field(default_factory=IndexDamages)
    """Its exits on a damaged index (:data:`~epochfs.sidecar.config.EXIT_INDEX`) in a row, until
    a good run: ``/healthz`` fails at :data:`~epochfs.sidecar.config.INDEX_DAMAGES_UNHEALTHY`."""
    stop_on_refusal: bool = False
    """An exit 2 at its start (its settings refused) stops the supervisor instead of a restart."""
    served: bool = False
    """A run of it got past its start with these settings (the FUSE view answered): an exit 2 of a
    later run is a crash, restarted with backoff, never a refusal that stops the sidecar (a
    restart that met what changed since, such as a write in the mount point, would else stop it
    for good)."""
    max_backoff: float | None = None
    """The longest wait before a restart (None: :attr:`ChildProcesses.BACKOFF_MAX`); the FUSE
    server's is short, since no new lookup works while it is down. The logged wait is this one."""
    remount: str = ""
    """Why this run's end is a remount, not a crash (the view lost or hung, so the supervisor
    killed it; its mount gone, so it exited 0): no crash counted, the backoff not grown. Set by
    the mount watch (:meth:`~.watch.MountWatch._remount`; for the folder publisher, killed hung:
    :meth:`~.watch.MountWatch._kill_hung_publisher`), cleared at each start."""
    log_thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None


class ChildProcesses:
    """The :class:`~epochfs.sidecar.supervisor.Supervisor`'s part that starts, reaps, restarts and
    stops its :class:`Child` processes (a mixin: the attributes below are set by its ``__init__``
    and its observability setup)."""

    BACKOFF_MIN = 0.5
    BACKOFF_MAX = 30.0
    STABLE_AFTER = 30.0
    """A child that ran this long before dying restarts at the minimum backoff again."""

    python: str
    log_level: str
    cache: Path
    sink: IO[str]
    _stop: threading.Event
    _children_lock: threading.RLock
    """Held while a child's bookkeeping changes (reaped, restarted), and by the probes' threads
    while they read it, so that /healthz and /readyz never see a restart counted before its
    process exists, nor an exit before its backoff and reason are set."""
    _multiproc_dir: Path | None
    _metrics: Any

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

    def _start(self, child: Child) -> bool:
        """Start ``child``; False when no process or thread can be had now (a pod's pids limit
        reached by the trainer's DataLoader workers, no memory): logged and tried again after the
        child's backoff (:meth:`_not_started`), the rest of the sidecar going on. A process that
        started without the thread that reads its log is killed and waited for: nothing
        half-started is left, and no child runs unwatched."""
        # -P: never import from the working directory (an epochfs/ folder there would shadow the
        # installed package).
        argv = [self.python, "-P", "-c", _CHILD_BOOT, str(os.getpid()), "--log-level", self.log_level,
                *child.argv]
        # Before the process exists: the probes' threads read these once ``proc`` is set.
        child.started_at = time.monotonic()
        child.last_error = ""
        child.remount = ""
        try:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                env=self._env(child), start_new_session=True,
            )
        except OSError as e:  # EAGAIN at the pids limit, ENOMEM
            self._not_started(child, f"could not start {child.name}: {e}")
            return False
        assert proc.stdout is not None
        pump = threading.Thread(target=pump_log, args=(child, proc.stdout, self.sink),
                                name=f"epochfs-log-{child.name}", daemon=True)
        try:
            pump.start()
        except RuntimeError as e:  # "can't start new thread": the same limit
            proc.kill()
            proc.wait()
            proc.stdout.close()
            self._not_started(child, f"could not start {child.name}: no thread to read its log "
                                     f"({e}); killed its process {proc.pid}")
            return False
        child.log_thread = pump
        child.proc = proc
        if self._metrics is not None:
            self._metrics.child_up.labels(child=child.name).set(1)
        log.info("started %s (pid %d)", child.name, proc.pid)
        return True

    def _not_started(self, child: Child, why: str) -> None:
        """A start that could not happen: no run, so no exit, no crash and no restart counted; the
        next try after the child's backoff, doubled as after a crash (a limit reached stays for a
        while: trying every tick would only fill the log)."""
        with self._children_lock:
            child.backoff = self._doubled_backoff(child)
            child.next_start = time.monotonic() + child.backoff
        log.error("%s; trying again in %.1fs", why, child.backoff)

    def _doubled_backoff(self, child: Child) -> float:
        """``child``'s wait after one more failed run or start: its last wait doubled, at least
        :attr:`BACKOFF_MIN` (after a stable run reset it to 0) and at most its longest."""
        longest = self.BACKOFF_MAX if child.max_backoff is None else child.max_backoff
        return min(longest, max(self.BACKOFF_MIN, child.backoff * 2))

    def _forget_metrics(self, pid: int) -> None:
        """Drop an exited child's live gauges (:func:`~epochfs.sidecar.metrics.forget_process`).
        Their files are on the cache's volume: one gone read-only or failing (ext4
        ``errors=remount-ro``) refuses the removal, which must not end the supervisor (the mount
        serves on; the sampler's restarts, and ``/healthz`` after its crashes, report the
        failure). The dead process's gauges then stay in ``/metrics``: one line says so."""
        from epochfs.sidecar.metrics import forget_process

        assert self._multiproc_dir is not None
        try:
            forget_process(pid, self._multiproc_dir)
        except OSError as e:
            log.error("could not remove the metric files of exited pid %d (%s): its live gauges "
                      "stay in /metrics", pid, e)

    def _reaped(self, child: Child) -> bool:
        """True once when ``child`` has exited; records it and schedules the restart."""
        if child.proc is None or child.proc.poll() is None:
            return False
        code = child.proc.returncode
        ran = time.monotonic() - child.started_at
        transient = code == EXIT_RETRY
        remount, child.remount = child.remount, ""
        mended = code == EXIT_INDEX  # the next start replaces the index: no crash, no longer wait
        refusal = child.stop_on_refusal and not child.served and code == 2 and ran < self.STABLE_AFTER
        if (transient or refusal) and child.log_thread is not None:
            child.log_thread.join(timeout=1)  # its last line, the reason, may still be in the pipe
        volume = refusal and volume_refusal(child)  # a crash, restarted: no stop
        refusal = refusal and not volume
        if self._multiproc_dir is not None:
            self._forget_metrics(child.proc.pid)
        if self._metrics is not None:
            self._metrics.child_up.labels(child=child.name).set(0)
        with self._children_lock:  # the probes read these together (retry_note, _children_doc)
            before = child.index.in_row
            child.index.exited(self.cache, damaged=mended, ran=ran, stable_after=self.STABLE_AFTER)
            streak = child.index.in_row
            # An index damaged on every run lately: the crashes' backoff from then on (a volume
            # that damages each index it is given gains nothing from a new one every 0.5 s).
            quick = (mended and streak < INDEX_DAMAGES_UNHEALTHY) or bool(remount)
            child.proc = None
            child.last_exit = code
            child.last_ran = ran
            if not refusal:
                if ran >= self.STABLE_AFTER:
                    child.backoff = 0.0
                    child.crashes = 0
                if not quick:
                    child.backoff = self._doubled_backoff(child)
                child.next_start = time.monotonic() + (self.BACKOFF_MIN if quick else child.backoff)
                child.no_room = transient and no_room(child.last_error)
                child.waiting = waiting_words(child.last_error, child.name) if transient else ""
                child.crashes += 0 if transient or mended or remount else 1
        if self._metrics is not None:
            if mended:
                self._metrics.index_damage_exits.inc()
            if streak != before:
                self._metrics.index_damage_streak.set(streak)
        if refusal:
            log.error("%s refused its settings (exit 2 after %.1fs): stopping", child.name, ran)
            return True  # the supervisor stops on it (core.Supervisor.run): no restart
        if volume and "is in use by another epochfs sample" in child.last_error:
            log.error("%s could not take the cache's sampler lock (%s): another epochfs sample uses "
                      "the cache; a crash, restarting in %.1fs", child.name, child.last_error,
                      child.backoff)
            return True
        if volume:
            log.error("%s could not use the cache, which this sidecar's start found usable (%s): "
                      "the node volume is failing; a crash, restarting in %.1fs", child.name,
                      child.last_error, child.backoff)
            return True
        if remount:
            said = "was killed by the supervisor" if code == -signal.SIGKILL else exit_words(code)
            log.warning("%s %s after %.1fs: %s; %s, not a crash; restarting in %.1fs", child.name, said, ran,
                        remount, "a remount" if child.name == "fuse" else "a restart", self.BACKOFF_MIN)
            return True
        if transient and child.no_room:
            log.warning("%s found the cache's volume full at its start (exit 75 after %.1fs): a wait "
                        "for room, not a crash; retry %d in %.1fs", child.name, ran, child.restarts + 1,
                        child.backoff)
            return True
        if transient:
            log.warning("%s could not reach the remote (exit 75 after %.1fs): a transient failure, "
                        "not a crash; retry %d in %.1fs", child.name, ran, child.restarts + 1,
                        child.backoff)
            return True
        if mended and streak >= INDEX_DAMAGES_UNHEALTHY:
            log.error("%s found the cache index damaged again (exit %d after %.1fs), %d runs in a "
                      "row with no good one between (an epoch cut, or %.0fs run): the node volume "
                      "may be failing; /healthz fails until a good run; restarting in %.1fs",
                      child.name, code, ran, streak, self.STABLE_AFTER, child.backoff)
            return True
        if mended:
            log.warning("%s found the cache index damaged (exit %d after %.1fs): not a crash, "
                        "restarting in %.1fs to replace it", child.name, code, ran, self.BACKOFF_MIN)
            return True
        log.warning("%s %s after %.1fs; restarting in %.1fs", child.name, exit_words(code), ran,
                    child.backoff)
        return True

    def retry_note(self, child: Child) -> str | None:
        """``remote unreachable: <reason>; retry 3 in 8 s`` while ``child`` waits for its restart
        after a transient failure, ``...; retry 3 running for 1 s`` while that restart runs (it
        may meet the same failure), None otherwise: after a stable run, another kind of exit, or
        a stop. Read by /readyz and written for ``epochfs status`` (the supervisor's state file)."""
        with self._children_lock:
            proc, waiting, restarts = child.proc, child.waiting, child.restarts
            next_start, started_at = child.next_start, child.started_at
        now = time.monotonic()
        if not waiting or self._stop.is_set():
            return None
        if proc is None:
            return f"{waiting}; retry {restarts + 1} in {max(0.0, next_start - now):.0f} s"
        running = now - started_at
        if running >= self.STABLE_AFTER:
            return None
        return f"{waiting}; retry {restarts} running for {running:.0f} s"

    def waiting_for_room(self, child: Child) -> bool:
        """Whether ``child`` waits for room on the cache's volume to start: its last exit said so
        (:attr:`Child.no_room`) and its :meth:`retry_note` still holds. The supervisor's
        ``epochfs_disk_full`` (a sampler that cannot start sets no gauge of its own)."""
        return child.no_room and self.retry_note(child) is not None

    def refused(self, child: Child) -> str | None:
        """The reason ``child`` gave for refusing its settings, when it exited 2 (the CLI's status
        for a bad setting: no such bucket or folder, access denied, a bad flag) before it had run
        :attr:`STABLE_AFTER` seconds; None otherwise. Restarting it would only say it again every
        30 s: the supervisor stops instead (docs/sidecar.md)."""
        if child.last_exit != 2 or child.last_ran >= self.STABLE_AFTER or child.served:
            return None
        if child.log_thread is not None:
            child.log_thread.join(timeout=2)  # its last lines, the reason among them
        if volume_refusal(child):
            return None
        return child.last_error or f"{child.name} exited with status 2"

    def _watch_index_damages(self, child: Child) -> None:
        """While index-damage exits of ``child`` are counted and it runs: end the count once its
        run proves good (an epoch cut, or :attr:`STABLE_AFTER` seconds), so that ``/healthz``
        answers 200 again without waiting for the run to end. Every tick; costs a stat of
        ``epochs.hwm`` only while a count runs."""
        if child.index.in_row == 0 or not child.alive:
            return
        ran = time.monotonic() - child.started_at
        with self._children_lock:
            streak = child.index.in_row
            if not child.index.proved(self.cache, ran=ran, stable_after=self.STABLE_AFTER):
                return
            child.index.clear()
        log.info("%s: the cache index works again (%s after %d index-damage exit(s) in a row)",
                 child.name, f"ran {self.STABLE_AFTER:.0f}s" if ran >= self.STABLE_AFTER else "an epoch cut",
                 streak)
        if self._metrics is not None:
            self._metrics.index_damage_streak.set(0)

    def _restart_due(self, child: Child) -> None:
        if child.proc is None and time.monotonic() >= child.next_start and not self._stop.is_set():
            with self._children_lock:  # the count and the new process appear together to the probes
                if not self._start(child):
                    return  # tried again after the backoff: not a restart
                child.restarts += 1
                retry = bool(child.waiting)  # after a transient failure (its reason kept)
            if self._metrics is not None:
                counter = self._metrics.child_retries if retry else self._metrics.child_restarts
                counter.labels(child=child.name).inc()

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
