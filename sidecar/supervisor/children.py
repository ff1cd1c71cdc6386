"""The supervisor's child processes: how one is started, reaped, restarted and stopped.

Separate from the mount watch and the endpoints because it is the one part that forks: the boot
snippet (``PR_SET_PDEATHSIG`` asked in the child, never with ``preexec_fn``, which is unsafe once
the supervisor has threads), the child's environment (settings as ``EPOCHFS_*`` variables, never
on a command line), the log pump that prefixes a child's output, and the restart backoff
(doubling from :attr:`ChildProcesses.BACKOFF_MIN` to :attr:`ChildProcesses.BACKOFF_MAX`, reset
after a child ran :attr:`ChildProcesses.STABLE_AFTER` seconds).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

log = logging.getLogger("epochfs.supervisor")

# Child bootstrap: ask the kernel to SIGTERM us when the supervisor dies, then run the CLI. Done in
# the child rather than with preexec_fn, which is unsafe once the supervisor has threads.
_CHILD_BOOT = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGTERM)\n"
    "if os.getppid() != int(sys.argv[1]): sys.exit(1)\n"
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
    stop_on_refusal: bool = False
    """An exit 2 at its start (its settings refused) stops the supervisor instead of a restart."""
    log_thread: threading.Thread | None = field(default=None, repr=False)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None


def _pump(child: Child, stream: IO[bytes], sink: IO[str]) -> None:
    """Copy a child's output to the supervisor's stderr, one prefixed line at a time (and keep its
    last error line: the reason of an exit 2)."""
    name = child.name
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace").rstrip("\n")
        if line.startswith("epochfs "):
            child.last_error = line
        with contextlib.suppress(ValueError, OSError):
            sink.write(f"[{name}] {line}\n")
            sink.flush()
    stream.close()


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
    sink: IO[str]
    _stop: threading.Event
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
            target=_pump, args=(child, child.proc.stdout, self.sink),
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
        child.last_ran = ran
        if child.stop_on_refusal and self.refused(child) is not None:
            log.error("%s refused its settings (exit 2 after %.1fs): stopping", child.name, ran)
            return True  # the supervisor stops on it (core.Supervisor.run): no restart
        if ran >= self.STABLE_AFTER:
            child.backoff = 0.0
        child.backoff = min(self.BACKOFF_MAX, max(self.BACKOFF_MIN, child.backoff * 2))
        child.next_start = time.monotonic() + child.backoff
        log.warning("%s exited with status %s after %.1fs; restarting in %.1fs",
                    child.name, code, ran, child.backoff)
        return True

    def refused(self, child: Child) -> str | None:
        """The reason ``child`` gave for refusing its settings, when it exited 2 (the CLI's status
        for a bad setting: no such bucket or folder, access denied, a bad flag) before it had run
        :attr:`STABLE_AFTER` seconds; None otherwise. Restarting it would only say it again every
        30 s: the supervisor stops instead (docs/sidecar.md)."""
        if child.last_exit != 2 or child.last_ran >= self.STABLE_AFTER:
            return None
        if child.log_thread is not None:
            child.log_thread.join(timeout=2)  # its last lines, the reason among them
        return child.last_error or f"{child.name} exited with status 2"

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
