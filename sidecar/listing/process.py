"""The listing in a process of its own, beside the sampler (``--list-process``, on by default).

Why a process: the listers parse pages (XML, the key checks, the hash into a rank: ~8-13 µs of CPU
a key) and the sampler's threads hand bytes on, admit samples and answer cuts, all under one GIL.
In one process, each slowed the other: 1M keys took minutes to list beside a fetching sampler
(0.5x the listing alone), and the fairness of early epochs depends on the listing being spread
over the key space when they are cut (docs/sampler.md); sixteen listers in the sampler's process
reached 0.94x a random sample's folders at 5,000 folders where four reached 0.75x, but the
fetches starved. In a process of its own the listing has its own interpreter: the kernel shares
the cores, not a lock.

What crosses the boundary is small, and most of it already went through the index: the rows and
the listing's progress (its estimate and skew, which pace the fetches) are committed to the index
by the listers, as in one process; the sampler reads them there. Over one socket pair go the settings and
the listing prepared by the parent (its spans, found before the sampler starts, so that a remote
that cannot be listed is still exit 2, and the discovery's first page where it is the listing's:
the child commits it without asking for it again, the sampler's first keys), whether the
sampler is fetching (the listers then leave it the index a share of the time, ``INDEX_SHARE``),
whether a listing is running (the fetch order's pace and waits), a refused setting found at the
end of a listing (exit 2, as for one found at the start), and the stop.

The first child is forked (:func:`.child.fork_child`) at the start of ``epochfs sample``, before the
sampler opens any SQLite connection or starts a thread, and waits for its settings: it has every
module the listing needs already imported, where a fresh interpreter took 0.2-0.5 s (seconds
under load) to import epochfs again before it could list, and the sampler's first fetches of a
listing of more than one page wait for the child's first pages. A child started later (after one
died, with the sampler's threads running) is a fresh interpreter (``python -c``), as forking a
process with threads is not safe.

Lifetimes: the child asks the kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``) and
also stops when the socket closes; it ignores SIGTERM and SIGINT, which are the parent's to act on
(a terminal's Ctrl-C reaches the whole process group): the parent sends the stop and waits
``STOP_GRACE`` seconds, then kills it. Killing the listing is always safe: each page commit is one
transaction and the next listing resumes from what the index holds. A child that dies otherwise
(kill -9, out of memory) is started again after a full-jitter pause (``pause_bound``, as a failed
listing is) and resumes the listing; the sampler goes on meanwhile. One that cannot start at all
(it exits before saying anything, :data:`MAX_FAILED_STARTS` times in a row) ends the sampler with
exit 2 and the reason, as a refused setting does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from epochfs.sidecar.config import ConfigError, SamplerSettings
from epochfs.sidecar.listing.background import QUIET, pause_bound
from epochfs.sidecar.listing.child import POLL, Child, Forked, Process, end_child
from epochfs.sidecar.remote.backoff import full_jitter

log = logging.getLogger("epochfs.catalog")

MAX_FAILED_STARTS = 5
"""Children in a row that exit before saying anything (a broken install, an import that fails)
before the sampler gives up with the reason (exit 2): the listing would never run, however often
it were started again."""

_BOOT = (
    # ``-c`` puts the working folder first on sys.path: an ``epochfs/`` folder there (a checkout's
    # parent, a user's dataset) would be imported instead of the package, and the child restarted
    # forever. (``-P`` does the same from Python 3.11 on.)
    # The group's SIGINT/SIGTERM (a terminal's Ctrl-C) are the sampler's to act on, from the
    # child's first moment: a signal during its imports printed a KeyboardInterrupt.
    "import signal, sys\n"
    "signal.signal(signal.SIGINT, signal.SIG_IGN); signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "if sys.path and sys.path[0] in ('', '.'): del sys.path[0]\n"
    "import ctypes, os\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"  # PR_SET_PDEATHSIG: die with the sampler
    "if os.getppid() != int(sys.argv[1]): sys.exit(1)\n"
    "from epochfs.sidecar.listing.child import child_main\n"
    "sys.exit(child_main(int(sys.argv[2])))\n"
)


class ListingProcess:
    """The parent's side: watched and stopped as a :class:`ListingThread` is (the same
    ``running``, ``fatal`` and ``join``), over the child's socket.

    ``served``: the relist requests already served when the sampler started (``epochfs relist``):
    each child starts from this, not from what the index says when it starts, so that a request
    made while a child was down or starting is still served.

    ``fetching``: whether the sampler fetches (None: never); the child's listers then leave it the
    index a share of the time (``INDEX_SHARE``). ``running``: the event to set while a listing runs
    in the child (None: one of its own). Both are made before this object and the sampler, which
    is given them at its construction."""

    def __init__(self, settings: SamplerSettings, *, stop: threading.Event, grace: float,
                 served: int, rng: random.Random | None = None,
                 fetching: Callable[[], bool] | None = None,
                 running: threading.Event | None = None,
                 forked: tuple[Forked, Connection] | None = None) -> None:
        self.settings = settings
        self.served = served
        self.stop = stop
        self._fetching: Callable[[], bool] = fetching or (lambda: False)
        self.grace = grace
        self.running = running if running is not None else threading.Event()
        """Set while a listing runs in the child (the fetch order looks for new keys sooner)."""
        self.fatal: BaseException | None = None
        self._prepared: object = None
        self._index_header: dict[str, Any] | None = None
        self._first_page: object = None
        self._rng = rng or random.Random()
        self._watch = threading.Thread(target=self._run, name="listing-process", daemon=True)
        self._child: Child | None = None
        self._forked = forked
        """A child forked before the sampler opened its index (:func:`.child.fork_child`), waiting for
        its settings: :meth:`spawn` gives them to it instead of starting a fresh interpreter."""
        self._proc: Process | None = None
        """The child of the moment (:meth:`close` kills it if it outlives the stop)."""
        self._heard = False
        """Whether the child of the moment has sent a message (it started)."""

    def spawn(self) -> None:
        """Start the child now, before the listing is prepared: its interpreter, imports, index
        connection and remote client (0.4-2.4 s on a loaded 2-core node) overlap the parent's
        discovery pages instead of delaying the first page after them. :meth:`start` hands it
        the prepared listing; :meth:`close` ends a child that never got one."""
        if self._child is None:
            forked, self._forked = self._forked, None
            self._child = self._launch() if forked is None else self._hand(*forked, forked[0].started)

    def close(self) -> None:
        """End the child now: one spawned but never started (the listing could not be prepared:
        it has written nothing, the listing begins with the start message), or one still running
        after :meth:`join` gave up on it (killing a listing is safe: a page commit is one
        transaction). Called before the sampler lets go of the cache, so no lister writes after."""
        if self._forked is not None:
            end_child(self._forked)
            self._forked = None
        if self._child is not None and not self._watch.is_alive():
            child, self._child = self._child, None
            end_child(child)
        running = self._proc
        if running is not None and running.poll() is None:
            running.kill()
            running.wait()

    def start(self, prepared: object = None, *, index_header: dict[str, Any] | None = None,
              first_page: object = None) -> None:
        """Run the listing (``prepared``: the listing to run, from :meth:`Lister.prepare`; None:
        the one the index has, if any; ``index_header``: the ``--index`` header the sampler read,
        so that the child does not read it again; ``first_page``: the first page the sampler's
        discovery read, :attr:`.PagedSource.first_page`, so that the child's first commit needs
        no request: the fetches start on those keys as soon as the child has started)."""
        self._prepared = prepared
        self._index_header = index_header
        self._first_page = first_page
        if prepared is not None:
            self.running.set()  # until the child says otherwise: the first pages come soon
        self._watch.start()

    def join(self, timeout: float | None = None) -> None:
        self._watch.join(timeout)

    def is_alive(self) -> bool:
        return self._watch.is_alive()

    def _run(self) -> None:
        bound: float | None = None
        failed_starts = 0
        while not self.stop.is_set():
            began = time.monotonic()
            self._heard = False
            rc = self._one(self._prepared)
            self._prepared = self._first_page = None  # a listing begun is resumed from the index
            if rc is None or self.stop.is_set() or self.fatal is not None:
                return
            if self._heard:
                failed_starts = 0
            elif rc != -1:  # -1: no process to be had (ENOMEM, EAGAIN): not this child's fault
                failed_starts += 1
            if failed_starts >= MAX_FAILED_STARTS:
                # Exit 2 with the reason, as a refused setting: a broken install does not mend by
                # restarting, and the supervisor stops with the line in the termination log.
                self.fatal = ConfigError(
                    f"the listing process exited with {rc} before it said anything, {failed_starts} "
                    "times in a row: it cannot start here (its error is in the log above); "
                    "--list-process 0 lists in the sampler's own process")
                self.stop.set()
                return
            ran = time.monotonic() - began
            bound = pause_bound(bound, 1 if ran >= QUIET else 0, ran)
            pause = full_jitter(bound, self._rng)
            log.warning("the listing process exited with %s; starting it again in %.1fs (the "
                        "listing resumes where the index has it; sampling goes on)", rc, pause)
            self.stop.wait(pause)

    def _launch(self) -> Child:
        """A new child (a fresh interpreter), given its settings at once (it opens the index and
        the remote while the parent prepares the listing)."""
        parent_end, child_end = socket.socketpair()
        spawned = time.time()
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, str(os.getpid()), str(child_end.fileno())],
                pass_fds=(child_end.fileno(),), stdin=subprocess.DEVNULL)
        except BaseException:
            parent_end.close()
            raise
        finally:
            child_end.close()
        return self._hand(proc, Connection(parent_end.detach()), spawned)

    def _hand(self, proc: Process, conn: Connection, spawned: float) -> Child:
        """Send ``proc`` its settings (``spawned``: when it was started, for its first log line)."""
        with contextlib.suppress(OSError):  # one that died at once: its exit status says how
            conn.send(("settings", self.settings, logging.getLogger().getEffectiveLevel(), spawned))
        return proc, conn

    def _one(self, prepared: object) -> int | None:
        """Run one child to its end: its exit status, or None after a stop asked for here."""
        child, self._child = self._child, None
        try:
            proc, conn = child or self._launch()
        except OSError as e:  # no process to be had now (out of memory, of processes, of fds)
            log.error("could not start the listing process: %s", e)
            return -1
        self._proc = proc
        try:
            conn.send(("start", prepared, self._index_header, self.served,
                       self._first_page if prepared is not None else None))
            told: bool | None = None
            while not self.stop.is_set():
                fetching = bool(self._fetching())
                if fetching != told:
                    conn.send(("fetching", fetching))
                    told = fetching
                if conn.poll(POLL):
                    self._receive(conn.recv())
                elif proc.poll() is not None:
                    break
        except (EOFError, OSError):
            pass  # the child is gone: its exit status says how
        except Exception as e:  # a message that does not unpickle: end this child, start another
            log.error("the listing process sent what the sampler cannot read (%s): ending it", e)
            proc.kill()
        finally:
            stopping = self.stop.is_set()
            if stopping:
                with contextlib.suppress(OSError):
                    conn.send(("stop",))
            self._drain(conn, proc)
            conn.close()
        if stopping:
            return None
        return proc.returncode

    def _drain(self, conn: Connection, proc: Process) -> None:
        """Read what the child still says (its last counts, a fatal error) until it exits and its
        end of the connection closes; kill it after ``grace`` seconds. What it sent just before it
        exited is read too: a child refused by the capacity check sends its reason and exits 2,
        and the parent, finding it exited between two looks, took it for a crash and started it
        again (an intermittent hang of ``epochfs sample --capacity 1``)."""
        deadline = time.monotonic() + self.grace
        while time.monotonic() < deadline:
            try:
                if conn.poll(POLL):
                    self._receive(conn.recv())
                elif proc.poll() is not None:
                    break
            except Exception:  # gone (its end closed), or unreadable: its exit status says the rest
                break
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("the listing process did not stop within %.0fs: killed (the listing "
                        "resumes from the index)", self.grace)
            proc.kill()
            proc.wait()
        if self.stop.is_set():
            self.running.clear()
        # Else another child comes: ``running`` stays as this one last said, so the fetch order's
        # pace holds through the pause and the start-up (cleared, it walked the listed keys
        # unpaced and, reaching their end, began a new pass over an unfinished listing).

    def _receive(self, message: tuple[Any, ...]) -> None:
        self._heard = True
        kind = message[0]
        if kind == "running":
            if message[1]:
                self.running.set()
            else:
                self.running.clear()
        elif kind == "fatal":
            _, refused, text = message
            self.fatal = ConfigError(text) if refused else RuntimeError(f"the listing failed: {text}")
            self.stop.set()


__all__ = ["ListingProcess"]
