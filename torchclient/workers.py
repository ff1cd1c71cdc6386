"""Telling a dead DataLoader worker from a sample's error.

A worker killed mid-epoch (out of memory, ``os._exit`` in a decoder) reaches the training loop in one
of two shapes. Usually torch notices the dead process and raises ``RuntimeError: DataLoader worker
(pid N) exited unexpectedly``. But when the worker dies just after it put a batch on the queue, the
main process unpickling that batch connects to the dying worker for the tensors' shared memory and
gets ``ConnectionResetError`` (or ``EOFError``) while the process is not reaped yet: torch checks the
workers once, finds them all alive, and re-raises the connection error. Training code (and our tests)
then sees a socket error instead of the worker's death, and torch's SIGCHLD handler raises the real
error a moment later wherever the main thread happens to be.

:func:`worker_failure` waits for that death (on the processes' sentinels, bounded) and names it, so
the caller raises one clear error and drops the broken DataLoader.
"""

from __future__ import annotations

from collections.abc import Sequence
from multiprocessing.connection import wait
from typing import Any

DYING_WORKER_SECONDS = 10.0
"""How long a broken link to a worker waits for that worker's exit before it counts as the error it
is (a worker that has closed its sockets exits within milliseconds)."""


def _raised_in_worker(exc: BaseException) -> bool:
    """True for an error a worker raised and torch re-raised here (``ExceptionWrapper.reraise``):
    a sample's own error, which says nothing about the worker's health."""
    return "in DataLoader worker process" in str(exc)


def worker_failure(exc: Exception, workers: Sequence[Any], *,
                   wait_seconds: float = DYING_WORKER_SECONDS) -> Exception | None:
    """The error a dead worker should surface as, or None when every worker lives.

    ``workers`` are the DataLoader's ``multiprocessing.Process`` objects. A broken connection or
    queue (``ConnectionError``, ``EOFError``) not raised by a worker means a worker is going away:
    wait up to ``wait_seconds`` for one to exit. torch's own "exited unexpectedly" error is returned
    as it is; any other error with a dead worker becomes a ``RuntimeError`` naming the pids.
    """
    if not workers:
        return None
    try:
        if isinstance(exc, (ConnectionError, EOFError)) and not _raised_in_worker(exc):
            ready = wait([worker.sentinel for worker in workers], timeout=wait_seconds)
            for worker in workers:
                if worker.sentinel in ready:
                    # The sentinel is ready once the exiting process closed its files, a moment
                    # before it can be reaped: is_alive() alone could still say True.
                    worker.join(timeout=wait_seconds)
        dead = [worker for worker in workers if not worker.is_alive()]
    except RuntimeError as signalled:  # torch's SIGCHLD handler saw the death during the wait
        return signalled
    if not dead:
        return None
    if isinstance(exc, RuntimeError) and "exited unexpectedly" in str(exc):
        return exc
    pids = ", ".join(str(worker.pid) for worker in dead)
    codes = ", ".join(str(worker.exitcode) for worker in dead)
    return RuntimeError(f"DataLoader worker (pid(s) {pids}) exited unexpectedly (exit code(s) {codes}); "
                        f"the epoch is incomplete and the next one starts new workers "
                        f"(it showed here as {type(exc).__name__}: {exc})")


def end_after_a_death(iterator: Any) -> None:
    """Shut down the workers of a DataLoader iterator one of whose workers died, without waiting
    on anything a worker shares.

    torch's own shutdown (``_shutdown_workers``) first sets an ``Event`` shared with the workers,
    under that event's lock, which each worker takes as it checks the event between batches. A
    worker killed in that instant (the out-of-memory killer's SIGKILL) leaves the lock taken for
    ever, and the shutdown then waits for it for ever: the next epoch, or the loader's close, hung.
    Such a DataLoader never serves again, so its pin-memory thread is stopped by its own
    (thread) event, its workers are taken off torch's SIGCHLD watch (their end is no error) and
    ended, and its queues let go without joining their feeder threads. Private DataLoader state,
    as torch has no public way to it; the iterator is marked shut down, so torch's shutdown (from
    its ``__del__`` too) does nothing more."""
    from torch.utils.data._utils import MP_STATUS_CHECK_INTERVAL, signal_handling

    iterator._shutdown = True
    results = getattr(iterator, "_worker_result_queue", None)
    thread = getattr(iterator, "_pin_memory_thread", None)
    try:
        if thread is not None:
            iterator._pin_memory_thread_done_event.set()  # it looks at this event between its reads
            thread.join(timeout=2 * MP_STATUS_CHECK_INTERVAL)
    finally:  # a Ctrl-C in that wait still ends the workers: nothing else would any more
        if getattr(iterator, "_worker_pids_set", False):
            signal_handling._remove_worker_pids(id(iterator))
            iterator._worker_pids_set = False
        workers = list(getattr(iterator, "_workers", []))
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
        for worker in workers:
            worker.join(timeout=MP_STATUS_CHECK_INTERVAL)
            if worker.is_alive():
                worker.kill()
                worker.join(timeout=MP_STATUS_CHECK_INTERVAL)
        for queue in [*getattr(iterator, "_index_queues", []), *([results] if results is not None else [])]:
            queue.cancel_join_thread()
            queue.close()
