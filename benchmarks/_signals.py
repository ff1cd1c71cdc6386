"""Signals of the benchmarks: SIGTERM (``kill PID``, a scheduler's or a wrapper's stop) cleans up as
Ctrl-C does, and what a benchmark forks is gone before it exits.

- :func:`entry`, every benchmark's ``if __name__ == "__main__"``: SIGTERM raises KeyboardInterrupt,
  so every ``finally`` and ``with`` block runs (servers stopped, mounts detached, scratch removed),
  then exit status 128 + the signal.
- :func:`signals_held`: a block that SIGTERM and Ctrl-C do not cut in two; one that arrives inside
  it raises KeyboardInterrupt as the block ends. For what must not be left half made: a process
  started and not yet in the hands of the ``finally`` that stops it, a pool half built.
- :func:`fork_pool`: a ``multiprocessing`` fork pool made inside :func:`signals_held` and always
  terminated and joined after its ``with`` block.

Why the pool needs both (seen when SIGTERM came as the mount benchmark started reading,
``tests/benchmarks/test_bench_signals.py``): a KeyboardInterrupt raised inside ``Pool()`` after it
had forked its worker and started its worker-handler thread left a pool that nothing terminated
(no ``with`` entered yet, its finalizer not yet registered). At exit, multiprocessing's own
``atexit`` SIGTERMed the worker; the still running worker-handler thread forked a replacement, which
inherited the SIGTERM ``SIG_IGN`` the benchmark had set, was reparented to pid 1 and sat on the pool's
queue forever, holding the benchmark's stdout and stderr (whoever read them to their end waited
forever). A KeyboardInterrupt raised inside the ``os.register_at_fork`` hooks ``Pool()`` runs as it
forks (logging's) is swallowed ("Exception ignored in: _releaseLock"): the benchmark went on with
SIGTERM ignored. Held signals raise after ``Pool()`` returned, where the ``finally`` terminates it;
and its workers take the SIGTERM that ``terminate()`` sends even the instant after their fork (the
benchmark's handler, which they inherit, lost it there: see :func:`fork_pool`).

Standard library only; :mod:`.harness` re-exports these names.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.pool
import os
import signal
import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import NoReturn

_OWNER = 0
"""The process that installed :func:`clean_up_on_sigterm`'s handlers (forked children inherit them)."""
_SIGNALLED = 0
"""The signal that interrupted the run (SIGTERM or SIGINT), 0 while none has."""
_HOLDING = 0
"""How many :func:`signals_held` blocks the owner is inside."""
_HELD = False
"""A signal arrived inside :func:`signals_held`: KeyboardInterrupt is raised as the outermost block ends."""


def _interrupt_now() -> bool:
    """Whether the owner raises KeyboardInterrupt now: not inside :func:`signals_held` (a forked child
    inherits the owner's count with its memory, so only the owner holds)."""
    global _HELD
    if _HOLDING and os.getpid() == _OWNER:
        _HELD = True
        return False
    return True


def _terminate(signum: int, frame: FrameType | None) -> None:
    global _SIGNALLED
    if os.getpid() != _OWNER:  # a forked child (a reader pool's worker): die of it as before
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    if _SIGNALLED == signal.SIGTERM:
        return  # once: a second one does not cut the clean-up short
    # Not SIG_IGN: a process forked after this one (a pool's worker-handler thread replacing a worker)
    # inherits it, and SIG_IGN made it one that neither the pool nor multiprocessing could stop.
    _SIGNALLED = signum
    if _interrupt_now():
        raise KeyboardInterrupt  # clean up as for Ctrl-C: servers stopped, mounts detached, scratch removed


def _interrupt(signum: int, frame: FrameType | None) -> None:
    global _SIGNALLED
    _SIGNALLED = _SIGNALLED or signum
    if _interrupt_now():
        signal.default_int_handler(signum, frame)


def clean_up_on_sigterm() -> None:
    """SIGTERM (``kill PID``, a scheduler's or a wrapper's stop) raises KeyboardInterrupt, as Ctrl-C
    does, so every ``finally`` and ``with`` block runs: the default action ends the process at
    once and left the servers it started running (an orphaned ``epochfs mount`` and its mounts)
    and its scratch on disk. Ctrl-C raises it too, also where the process was started ignoring
    SIGINT (``&`` in a script), and both are unblocked in the calling thread, where it was started
    with them blocked."""
    global _OWNER, _SIGNALLED, _HOLDING, _HELD
    _OWNER, _SIGNALLED, _HOLDING, _HELD = os.getpid(), 0, 0, False
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _interrupt)
    # A signal mask is inherited through exec: a parent that started this process with SIGTERM
    # blocked (a launcher's thread, a test runner's worker) left a `kill PID` pending forever.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """A block that SIGTERM and Ctrl-C do not interrupt: one that arrives inside it raises
    KeyboardInterrupt when the outermost such block ends.

    For steps that must not be cut in two: a KeyboardInterrupt raised between a fork and the
    ``try`` that would stop the child leaves the child to nobody, and one raised inside a fork's
    ``os.register_at_fork`` hooks is swallowed, the signal lost. Keep the block short: nothing in it
    can be interrupted."""
    global _HOLDING, _HELD
    _HOLDING += 1
    try:
        yield
    finally:
        _HOLDING -= 1
        if not _HOLDING and _HELD:
            _HELD = False
            raise KeyboardInterrupt


def _worker_start() -> None:
    """A :func:`fork_pool` worker's first step: SIGTERM ends it as multiprocessing expects (the
    default action, in the kernel), then SIGTERM unblocked: one sent since the fork ends it now."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})


@contextlib.contextmanager
def fork_pool(processes: int) -> Iterator[multiprocessing.pool.Pool]:
    """A pool of ``processes`` forked workers for a ``with`` block, terminated and joined after it.

    ``Pool()`` runs inside :func:`signals_held`, so a SIGTERM or Ctrl-C while it forks and starts
    its threads takes effect once it has returned, inside the ``try`` whose ``finally`` stops it:
    its worker-handler thread first (it replaces a worker that dies), then the workers (SIGTERM,
    which each worker takes even when it comes the instant after its fork), each joined. Every
    worker is gone when the block has ended, whatever ended it."""
    pool: multiprocessing.pool.Pool | None = None
    try:
        with signals_held():
            # Its threads inherit this mask (SIGTERM comes to the main thread), and so does every worker,
            # forked by them or here: a worker takes the SIGTERM that terminate() sends only once it
            # has set SIG_DFL (_worker_start), never in the instant after fork in which Python drops
            # a signal that its handler caught (the worker then blocked on the pool's queue forever,
            # and terminate() with it, joining it).
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
            try:
                pool = multiprocessing.get_context("fork").Pool(processes, initializer=_worker_start)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        yield pool
    finally:
        if pool is not None:
            pool.terminate()
            pool.join()


def entry(run: Callable[[], int], name: str) -> NoReturn:
    """A benchmark's ``if __name__ == "__main__"``: :func:`clean_up_on_sigterm`, then ``run()``; on
    SIGTERM or Ctrl-C, once its clean-up is done, one line and exit status 128 + the signal (as a
    shell reports a process that signal ended), never 0."""
    try:
        clean_up_on_sigterm()  # in the try: a SIGTERM pending since the start is raised here
        status = run()
    except KeyboardInterrupt:
        signum = _SIGNALLED or signal.SIGINT
        print(f"{name}: interrupted by {signal.Signals(signum).name}; what it started is stopped and "
              "its scratch removed", file=sys.stderr)
        status = 128 + signum
    sys.exit(status)
