"""The threads that run what may block, off the I/O thread: queued workers and single-flight checks.

Its own module because this is where the endpoints' cost under a flood is bounded: a fixed set of
daemon threads with bounded queues (full: the caller answers 503), and *flights* that share one
running check or metrics collection among every request that arrives while it runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from epochfs.sidecar.endpoints.http11 import Reply, text_reply

if TYPE_CHECKING:
    from epochfs.sidecar.endpoints.conn import Conn

log = logging.getLogger("epochfs.endpoints")

Check = Callable[[], tuple[bool, dict[str, Any]]]


def check_reply(check: Check) -> Reply:
    """Run a check: 200 with its JSON when ok, 503 otherwise (also when it raises)."""
    try:
        ok, details = check()
        body = json.dumps({"ok": ok, **details}, sort_keys=True, default=str).encode() + b"\n"
    except Exception as e:  # a probe must answer, never hang up
        ok, body = False, json.dumps({"ok": False, "error": repr(e)}).encode() + b"\n"
    return Reply(200 if ok else 503, body, "application/json")


def metrics_reply(registry: CollectorRegistry) -> Reply:
    try:
        return Reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)
    except Exception as e:
        log.exception("metrics collection failed")
        return text_reply(500, f"metrics collection failed: {e!r}")


class Worker:
    """One daemon thread running jobs from a bounded queue (it never delays the process's exit)."""

    def __init__(self, name: str, size: int) -> None:
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=max(1, size))
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Callable[[], None]) -> bool:
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            return False
        return True

    def stop(self) -> None:
        """Drop queued jobs and ask the thread to end (after the job it runs, if one hangs)."""
        while True:
            try:
                self._jobs.get_nowait()
            except queue.Empty:
                break
        with contextlib.suppress(queue.Full):
            self._jobs.put_nowait(None)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except Exception:
                log.exception("endpoint worker %s", self._thread.name)


class Flight:
    """One computation (a check, a metrics collection) shared by every request that arrives while it
    runs."""

    def __init__(self, name: str, compute: Callable[[], Reply], timeout_reply: Reply) -> None:
        self.name = name
        self.compute = compute
        self.timeout_reply = timeout_reply
        self.worker = Worker(f"epochfs-http-{name}", 1)
        self.running = False
        self.started = 0.0
        self.waiters: list[tuple[Conn, int]] = []
