"""The listing process's own side, and the child made by forking the sampler (:mod:`.process`).

:mod:`.process` is the parent's side: it starts a child, hands it its settings and the listing it
prepared, and follows it. This module is what runs in the child (:func:`child_main`: the
listing until the parent stops it) and the fork that makes the first one (:func:`fork_child`):
forked at the very start of ``epochfs sample``, before any SQLite connection or thread, a child
has every module the listing needs already imported, where a fresh interpreter took 0.2-0.5 s
to import them before it could list (docs/performance.md, "Start-up to the first object GET,
second cut").

A child names itself :data:`NAME` (``/proc/PID/comm``) once it has its settings: a forked
child's command line is the sampler's own, so the metrics find the listing among the sampler's
children by that name (``metrics_scrape.LISTING_NAME``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any, Protocol, cast

from epochfs.sidecar.config import ConfigError, SamplerSettings
from epochfs.sidecar.logsettings import LOG_FORMAT

if TYPE_CHECKING:
    from epochfs.sidecar.remote import Remote, RemoteObject
    from epochfs.sidecar.store import Store

log = logging.getLogger("epochfs.catalog")

POLL = 0.05
"""Seconds between the two sides' looks at each other (state changes travel within this)."""
NAME = b"epochfs-listing"
"""The listing process's name (``prctl(PR_SET_NAME)``, at most 15 bytes): what
``/proc/PID/comm`` says of it, forked or started."""
PR_SET_NAME, PR_SET_PDEATHSIG = 15, 1


class Process(Protocol):
    """What the parent uses of a child: :class:`subprocess.Popen`'s or :class:`Forked`'s."""

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def kill(self) -> None: ...


WAIT_POLL_FIRST = 0.0005
"""Seconds of :meth:`Forked.wait`'s first sleep between two looks at the child."""

WAIT_POLL_MAX = 0.005
"""Seconds of its longest sleep between two looks."""


class Forked:
    """A child made by :func:`fork_child`, with the parts of :class:`subprocess.Popen` the parent
    uses (its exit status as Popen gives it: a signal's number negated). Reaped under a lock, as
    Popen does: the parent's close and its watch thread may both ask, and a second ``waitpid`` of
    a reaped child would lose its status."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.started = time.time()
        self.returncode: int | None = None
        self._reaping = threading.Lock()

    def poll(self) -> int | None:
        with self._reaping:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:  # reaped elsewhere: its status is lost
                    self.returncode = 255
                else:
                    if pid:
                        self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit status once it has exited. Polled as :meth:`subprocess.Popen.wait` polls a
        child with a timeout, from 0.5 ms up to :data:`WAIT_POLL_MAX`: a child just killed (the
        one a listing of one page ends before the first object GET) is reaped within a
        millisecond, where a first sleep of 5 ms put those on the sampler's start."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = WAIT_POLL_FIRST
        while (rc := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"listing process {self.pid}", timeout or 0.0)
            time.sleep(delay)
            delay = min(delay * 2, WAIT_POLL_MAX)
        return rc

    def kill(self) -> None:
        if self.poll() is None:  # not reaped: the pid is still this child's
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


Child = tuple[Process, Connection]
"""A child and the parent's end of its socket."""


def fork_child() -> tuple[Forked, Connection] | None:
    """A listing child forked now, waiting for its settings (:meth:`.ListingProcess.spawn` sends
    them), or None where it cannot be forked safely (another thread runs: a lock it holds would
    stay held in the child for ever) or at all (then a fresh interpreter is started instead).

    Call it before this process opens any SQLite connection to a file: SQLite's locks are kept
    per process, and a child that inherits a connection's lock state may take a lock it does not
    hold. The child opens the index of its own only once it has its settings, after the parent
    has checked and recovered it, as a started child does."""
    if threading.active_count() != 1:
        return None
    parent = os.getpid()
    parent_end, child_end = socket.socketpair()
    try:
        pid = os.fork()
    except OSError as e:
        log.debug("could not fork the listing process: %s", e)
        parent_end.close()
        child_end.close()
        return None
    if pid == 0:  # the child: what the boot of a started one does, then its listing
        rc = 1
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            parent_end.close()
            # Until its settings come the child only waits on the socket, which the parent's
            # exit closes; asked to die with the parent from then on (ctypes' import is CPU
            # the sampler's start-up needs more).
            rc = child_main(child_end.detach(), parent=parent)
        except BaseException as e:  # never up the sampler's stack: its cleanups are not the child's
            with contextlib.suppress(Exception):
                log.error("the listing process failed: %s", e)
        finally:
            os._exit(rc)
    child_end.close()
    return Forked(pid), Connection(parent_end.detach())


def end_child(child: Child) -> None:
    """End a child that has not started listing (closing its socket ends its wait; killed too)."""
    proc, conn = child
    conn.close()
    proc.kill()
    proc.wait()


def child_main(fd: int, *, parent: int | None = None) -> int:
    """The child: the listing of ``settings`` (sent first over ``fd``) until the parent stops it.
    ``parent``: a forked child's parent, which it asks the kernel to die with once the settings
    come (a started child's boot asks first thing, ``process._BOOT``)."""
    conn = Connection(fd)  # the group's signals are ignored from the boot's first line
    try:
        _kind, settings, level, spawned = conn.recv()
    except EOFError:
        return 0
    import ctypes

    libc = ctypes.CDLL(None)
    libc.prctl(PR_SET_NAME, NAME)
    if parent is not None:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # die with the sampler
        if os.getppid() != parent:  # it died before that
            return 1
    logging.basicConfig(level=level, format=LOG_FORMAT, stream=sys.stderr)
    from epochfs.sidecar import redact

    redact.install()
    # Imported here: the parent imports this module for ListingProcess alone.
    from epochfs.sidecar.listing.lister import FIRST_ROUND_LISTERS
    from epochfs.sidecar.remote import open_remote
    from epochfs.sidecar.store import Store

    store: Store | None = None
    remote: Remote | None = None
    try:
        try:  # before the parent has prepared the listing: the parent's own open says what fails
            store = Store(settings.cache)
            remote = open_remote(settings.remote, endpoint_url=settings.endpoint_url,
                                 index_url=settings.index_url,
                                 concurrency=max(settings.list_threads, FIRST_ROUND_LISTERS),
                                 read_timeout=settings.read_timeout)
        except Exception as e:
            failed: Exception | None = e
        else:
            failed = None
        _kind, prepared, index_header, served, first_page = conn.recv()
        if failed is not None or store is None or remote is None:
            log.error("the listing process could not open the cache or the remote: %s", failed)
            return 1
        given = (f", given the first page the sampler read ({len(first_page[0])} keys)"
                 if isinstance(first_page, tuple) else "")
        log.info("listing in process %d (%.2fs after it was started)%s", os.getpid(),
                 time.time() - spawned, given)
        return _list(conn, settings, store, remote, prepared, index_header, served, first_page)
    except EOFError:
        return 0  # the parent let go before the listing began (it could not be prepared)
    except Exception as e:  # one line, no traceback: the parent starts another (the log says so)
        log.error("the listing process failed: %s", e, exc_info=log.isEnabledFor(logging.DEBUG))
        return 1
    finally:
        if remote is not None:
            remote.close()
        if store is not None:
            store.close()
        conn.close()


def _list(conn: Connection, settings: SamplerSettings, store: Store, remote: Remote,
          prepared: object, index_header: dict[str, Any] | None, served: int | None,
          first_page: object = None) -> int:
    from epochfs.sidecar.listing import Lister, ListingThread
    from epochfs.sidecar.listing.capacity import check_capacity
    from epochfs.sidecar.listing.indexfile import listing_source
    from epochfs.sidecar.listing.paged import PagedSource

    stop = threading.Event()
    fetching = [False]
    source = listing_source(settings, remote, stop=stop, index_header=index_header)
    if first_page is not None and isinstance(source, PagedSource):
        objects, done = cast("tuple[list[RemoteObject], bool]", first_page)
        source.keep_first_page(objects, done)
    lister = Lister(store, source, seed=settings.seed,
                    shard_index=settings.shard_index, shard_count=settings.shard_count,
                    object_limit=settings.object_limit, threads=settings.list_threads, stop=stop,
                    include=settings.include, exclude=settings.exclude,
                    yield_to=lambda: fetching[0])
    listing = ListingThread(lister, interval=settings.relist_interval, prepared=prepared,
                            on_complete=lambda report: check_capacity(settings, report), served=served)
    if prepared is not None or lister.needed():
        listing.running.set()  # as the parent has it: no moment without the fetch order's pace
    listing.start()
    said: bool | None = None
    while listing.is_alive():
        if listing.running.is_set() != said:
            said = listing.running.is_set()
            conn.send(("running", said))
        try:
            if conn.poll(POLL):
                message = conn.recv()
                if message[0] == "fetching":
                    fetching[0] = bool(message[1])
                elif message[0] == "stop":
                    stop.set()
        except (EOFError, OSError):
            stop.set()  # the parent is gone
    listing.join()
    if listing.fatal is not None:
        error = listing.fatal
        with contextlib.suppress(OSError):
            # As text: an exception of any kind may not unpickle in the sampler.
            text = str(error) if isinstance(error, ConfigError) else f"{type(error).__name__}: {error}"
            conn.send(("fatal", isinstance(error, ConfigError), text))
        return 2
    return 0


__all__ = ["NAME", "POLL", "Child", "Forked", "Process", "child_main", "end_child", "fork_child"]
