"""Keeping the kernel's caches right beside the FUSE loop: invalidate what changed, warm what is new.

The mount lets the kernel cache entries, attributes and symlink targets for a long time (see
:mod:`epochfs.fuse.operations`). Two threads keep that safe and fast:

* :class:`Refresher` re-reads the store every half second (or at once when poked after a cut on
  lookup), records the reads the view noted, and tells the kernel to drop what changed: ``latest``,
  ``status.json`` and retired epochs, through libfuse's notification calls (:class:`KernelNotifier`);
* :class:`Warmer` reads every symlink of a new epoch once through the mount, ahead of the trainer
  (from a child process: the server itself never waits on its own mount).

Import this module only after ``FUSE_LIBRARY_PATH`` is set (see :mod:`epochfs.fuse.server`):
mfusepy binds libfuse when it is imported.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Collection
from pathlib import Path

from epochfs.fuse.epochreads import retired
from epochfs.fuse.lost import MAX_INVALIDATIONS
from epochfs.fuse.lowlevel_notify import KernelNotifier
from epochfs.fuse.view import View
from epochfs.torchclient.layout import (
    CLASSES_NAME,
    CONTROL_DIR,
    LATEST_NAME,
    STATUS_NAME,
    epoch_name,
    manifest_name,
)

__all__ = ["KernelNotifier", "Refresher", "Warmer"]

log = logging.getLogger("epochfs.fuse")


class Refresher:
    """Re-reads the store every ``interval`` seconds, records reads, invalidates what changed."""

    def __init__(self, *, view: View, interval: float, on_tick: Callable[[], object] | None = None,
                 warmer: Warmer | None = None) -> None:
        """``on_tick``: called at each refresh too (the server follows the in-use window);
        ``warmer``: told of the epochs that retired, to forget them."""
        if interval <= 0:
            raise ValueError("refresh interval must be positive")
        self.view = view
        self.interval = interval
        self.on_tick = on_tick
        self.warmer = warmer
        self.notifier = KernelNotifier(None)
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen = view.snapshot  # what the kernel was last told about

    def start(self, notifier: KernelNotifier) -> None:
        self.notifier = notifier
        self._thread = threading.Thread(target=self._run, name="epochfs-refresh", daemon=True)
        self._thread.start()

    @property
    def started(self) -> bool:
        """Whether :meth:`start` ran: the mount came up (its ``init``), so the kernel holds it."""
        return self._thread is not None

    def stop(self, timeout: float = 5.0) -> None:
        """Close the notifier (so no notification is sent once this returns, even by a tick that
        is still running), then end the thread, waiting up to ``timeout`` seconds for it."""
        self.notifier.close()
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout)

    def poke(self) -> None:
        """Refresh now (after a cut on lookup, say) instead of at the next tick."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:
                log.exception("refresh failed; retrying in %.1fs", self.interval)
            self._wake.wait(self.interval)
            self._wake.clear()

    def tick(self) -> None:
        view = self.view
        view.renew_held()
        view.flush_reads()
        view.refresh()
        # Compare with what the kernel last heard of, not with the view's previous snapshot:
        # request threads refresh the view too (a cut on lookup) and must not hide a change.
        old, new = self._seen, view.snapshot
        self._seen = new
        n = self.notifier
        for gone in sorted(set(old.live) - set(new.live)):
            log.info("epoch %d retired: removing it from the mount", gone)
            n.invalidate(f"/{CONTROL_DIR}/{manifest_name(gone)}")
            n.invalidate(f"/{epoch_name(gone)}")
            n.forget_root_entry(epoch_name(gone))
        if self.warmer is not None:  # by the live set: an epoch may come and go between two ticks
            self.warmer.forget_retired(new.live)
        if old.latest != new.latest:
            n.invalidate(f"/{LATEST_NAME}")
            n.forget_root_entry(LATEST_NAME)
        if old.status_key != new.status_key or len(old.status) != len(new.status):
            n.invalidate(f"/{CONTROL_DIR}/{STATUS_NAME}")
        self._forget_lost(new.live)
        if view.classes.tick():  # the class folders grew: classes.json's size changed
            n.invalidate(f"/{CONTROL_DIR}/{CLASSES_NAME}")
        if self.on_tick is not None:  # last: a failure here skips nothing of the above
            self.on_tick()

    def _forget_lost(self, live: dict[int, float]) -> None:
        """Samples newly lost (:mod:`epochfs.fuse.lost`): the kernel may hold their entries as
        symlinks to the object files that are gone (ENOENT); drop what it cached of them in every
        live epoch, so the next open asks the server (a regular file now, EIO)."""
        keys = self.view.lost.take_new()
        if not keys:
            return
        log.warning("%d sample(s) lost from the remote (cannot be fetched again), e.g. %r: their "
                    "entries stay in every live epoch and a read of one answers EIO", len(keys), keys[0])
        if len(keys) > MAX_INVALIDATIONS:
            log.warning("only %d of them dropped from the kernel's caches: the others answer ENOENT "
                        "until their entry timeout", MAX_INVALIDATIONS)
        for key in keys[:MAX_INVALIDATIONS]:
            for n in sorted(live):
                path = f"/{epoch_name(n)}/{key}"
                self.notifier.forget_entry(path)  # first: the held inode is of the old type (a symlink)
                self.notifier.invalidate(path)


# The warm-up child: lists the folders of ``<mount>/<name>`` and reads each symlink once, for each
# epoch folder name (:func:`epoch_name`) it reads on stdin, answering "<name> count" (or
# "<name> retired", "<name> error ...") on stdout.
# Standard library only, so it starts in milliseconds; it dies with the thread that started it.
_WARM_CHILD = r"""
import ctypes, os, signal, sys
ctypes.CDLL(None).prctl(1, signal.SIGKILL)
if os.getppid() != int(sys.argv[3]):
    sys.exit(0)
mount, limit = sys.argv[1], int(sys.argv[2])

def warm(base):
    count, folders = 0, [base]
    while folders:
        with os.scandir(folders.pop()) as it:
            subfolders = []
            for entry in it:  # the server lists in path order
                if entry.is_symlink():
                    if count >= limit:
                        return count
                    os.readlink(entry.path)
                    count += 1
                elif entry.is_dir(follow_symlinks=False):
                    subfolders.append(entry.path)
        folders.extend(reversed(subfolders))
    return count

for line in sys.stdin:
    name = line.strip()
    try:
        answer = str(warm(os.path.join(mount, name)))
    except FileNotFoundError:
        answer = "retired"
    except OSError as e:
        answer = "error " + str(e)
    print(name, answer, flush=True)
"""


class Warmer:
    """Reads each symlink of an epoch once through the mount, right after the epoch's first lookup.

    With ``FUSE_CAP_CACHE_SYMLINKS`` the kernel keeps a symlink's target once it has read it, so a
    trainer's first open of a file costs a readlink round trip into Python (~30 µs) on top of the
    read itself; for small files that halves throughput. The warmer pays those round trips ahead
    of the reader, on another core, in the order a listing gives. It only lists and reads links,
    never sample bytes; epochs larger than ``max_files`` are warmed up to that many files (each
    cached target holds a page of kernel memory, reclaimable under pressure).

    The reads run in a **child process**, never in the server's own: a FUSE server that waits on
    its own mount cannot die. Killed (kill -9) while one of its threads waited for the answer to
    a readlink on its mount, the server stayed a zombie forever (that thread waits uninterruptibly
    for an answer only the dead threads could give, and the device stays open as long as the
    process exists), and with it the mount and every reader of it. A child's wait ends when the
    server's device closes; the child dies with the thread that started it (``PR_SET_PDEATHSIG``).
    """

    def __init__(self, *, view: View, mount: Path, max_files: int = 200_000) -> None:
        if max_files < 0:
            raise ValueError("max_files must not be negative")
        self.view = view
        self.mount = mount
        self.max_files = max_files
        self.warmed: dict[int, int] = {}
        self._requested: set[int] = set()
        self._queue: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._child: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    def request(self, n: int) -> None:
        if n in self._requested or self.max_files == 0:
            return
        with self._lock:
            if n in self._requested or self._stop.is_set():
                return
            self._requested.add(n)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="epochfs-warm", daemon=True)
                self._thread.start()
        self._queue.put(n)

    def forget_retired(self, live: Collection[int]) -> None:
        """Forget the epochs that retired (:func:`~epochfs.fuse.epochreads.retired`): one is never
        requested again (a lookup of it answers ENOENT first), and else an entry of each stays for
        the life of the mount. An epoch newer than ``live`` is kept, so it is not warmed twice."""
        with self._lock:
            for n in retired(list(self._requested | set(self.warmed)), live):
                self._requested.discard(n)
                self.warmed.pop(n, None)

    def stop(self, timeout: float = 5.0) -> None:
        """End the warm-up (it reads through the mount, so stop it while the mount still answers)."""
        with self._lock:
            self._stop.set()
            thread, child = self._thread, self._child
        self._queue.put(None)
        if child is not None and child.poll() is None:
            child.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=timeout)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=timeout)

    def _start_child(self) -> subprocess.Popen[str] | None:
        with self._lock:
            if self._stop.is_set():
                return None
            self._child = subprocess.Popen(
                [sys.executable, "-c", _WARM_CHILD, str(self.mount), str(self.max_files), str(os.getpid())],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, close_fds=True,
            )
            return self._child

    def _run(self) -> None:
        child: subprocess.Popen[str] | None = None
        try:
            while not self._stop.is_set():
                n = self._queue.get()
                if n is None or self._stop.is_set():
                    return
                if child is None:
                    child = self._start_child()
                    if child is None:
                        return
                assert child.stdin is not None and child.stdout is not None
                name = epoch_name(n)
                try:
                    child.stdin.write(f"{name}\n")
                    child.stdin.flush()
                    answer = child.stdout.readline().strip().split(maxsplit=1)
                except (OSError, ValueError):
                    answer = []
                if len(answer) < 2 or answer[0] != name:
                    if not self._stop.is_set():
                        log.warning("warm-up of epoch %d stopped: the warm-up process ended", n)
                    return
                if answer[1].isdigit():
                    count = self.warmed[n] = int(answer[1])  # forget_retired may drop it at once
                    log.debug("warmed %d symlink(s) of epoch %d", count, n)
                elif answer[1].startswith("error") and not self._stop.is_set():
                    log.warning("warm-up of epoch %d stopped: %s", n, answer[1][6:])
                else:
                    log.debug("warm-up of epoch %d: %s", n, answer[1])
        except Exception:
            log.exception("warm-up failed")
        finally:
            if child is not None and child.poll() is None:
                child.kill()
                child.wait()
