"""A dead DataLoader worker is told from a sample's error, also when it shows as a broken link.

Real processes: a worker that exits just after the error was seen is the race CI met (the batch's
shared memory fetched from a worker in the middle of exiting gave ConnectionResetError).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import time
from multiprocessing.connection import Connection

import pytest

from epochfs.torchclient.workers import worker_failure

CONTEXT = multiprocessing.get_context("fork")


def _exit_when_told(conn: Connection, code: int) -> None:
    conn.recv()
    os._exit(code)


def _serve_until_told(conn: Connection) -> None:
    conn.recv()


@pytest.fixture
def workers():
    started = []
    links = []
    for target, args in ((_serve_until_told, ()), (_exit_when_told, (3,))):
        ours, theirs = CONTEXT.Pipe()
        process = CONTEXT.Process(target=target, args=(theirs, *args), daemon=True)
        process.start()
        started.append(process)
        links.append(ours)
    yield started, links
    for link in links:
        with contextlib.suppress(OSError):  # the exited worker's end is closed
            link.send("stop")
    for process in started:
        process.join(timeout=10)


def test_a_broken_link_waits_for_the_worker_that_is_exiting(workers) -> None:
    processes, links = workers
    links[1].send("exit")  # it exits now, while the error is looked at
    failure = worker_failure(ConnectionResetError(104, "Connection reset by peer"), processes)
    assert isinstance(failure, RuntimeError)
    assert f"pid(s) {processes[1].pid}" in str(failure) and "exit code(s) 3" in str(failure)
    assert "exited unexpectedly" in str(failure) and "ConnectionResetError" in str(failure)


def test_torchs_own_error_for_a_dead_worker_is_kept(workers) -> None:
    processes, links = workers
    links[1].send("exit")
    processes[1].join(timeout=10)
    torch_error = RuntimeError(f"DataLoader worker (pid(s) {processes[1].pid}) exited unexpectedly")
    assert worker_failure(torch_error, processes) is torch_error


def test_a_samples_error_with_live_workers_is_not_a_worker_failure(workers) -> None:
    processes, _ = workers
    started = time.monotonic()
    # A worker's own connection error (re-raised by torch) says nothing of its health: no waiting.
    raised_in_worker = ConnectionResetError("Caught ConnectionResetError in DataLoader worker process 1.")
    assert worker_failure(raised_in_worker, processes, wait_seconds=300) is None
    assert worker_failure(ValueError("Caught ValueError in DataLoader worker process 0."), processes) is None
    assert time.monotonic() - started < 60  # far below the 300 s it would wait for a dying worker
    assert worker_failure(EOFError(), [], wait_seconds=300) is None
