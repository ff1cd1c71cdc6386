"""``epochfs mount``: the foreground FUSE server over one cache folder.

Start-up order matters: settings and mount point are checked first (a clear error and exit 2,
nothing mounted), then the read-only link root is made, then libfuse 3 is chosen and mfusepy
imported, then the mount.

SIGTERM, SIGINT and SIGHUP are not left to libfuse: its handler ends the loop at once, and libfuse
then closes the device and frees the session while our refresher thread may be sending the kernel
a notification (``fuse: writing device: Bad file descriptor``, then SIGSEGV). Instead they are
blocked in every thread and taken by one thread of ours (:class:`StopSignals`), which stops the
threads beside the loop first and only then asks the loop to end
(:meth:`~epochfs.fuse.operations.EpochOperations.stop_serving`). libfuse then unmounts (lazily
when busy); we remove the link-root bind mount we made and exit 0.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from epochfs.fuse.errors import MountError
from epochfs.fuse.inuse import cache_timeout, describe, guaranteed_pause, read_debounce
from epochfs.fuse.libfuse import find_libfuse3
from epochfs.fuse.mounting import (
    DEFAULT_LINK_ROOT_NAME,
    MountEntry,
    check_link_root,
    check_link_root_view,
    check_mount_apart,
    check_mount_point,
    find_mount,
    is_dead,
    lazy_unmount,
    make_readonly_bind,
    release_link_root,
    view_source,
)
from epochfs.sidecar.store import Store

if TYPE_CHECKING:
    from epochfs.fuse.operations import EpochOperations

log = logging.getLogger("epochfs.fuse")

SWITCH_INTERVAL = 0.0005
"""The server's GIL switch interval (seconds): requests, not tree builds, come first."""

__all__ = ["StopSignals", "cache_timeout", "guaranteed_pause", "read_debounce", "run_mount"]
"""The window's arithmetic lives in :mod:`epochfs.fuse.inuse`; named here too (tests and docs)."""


class StopSignals:
    """Takes SIGTERM, SIGINT and SIGHUP away from libfuse for the life of the mount.

    :meth:`__enter__` blocks them in the calling (main) thread before libfuse starts its threads,
    so every thread inherits the block, and starts a thread that waits for them
    (``sigtimedwait``) and calls ``on_signal(wake)`` once, off libfuse's signal path. ``wake``
    interrupts the main thread's wait inside libfuse's loop (a SIGUSR1 with a no-op handler) so
    that it sees the loop was asked to end. :meth:`__exit__` ends the thread, discards a signal
    that came during the teardown (we are stopping anyway) and restores the mask and handler.
    """

    SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
    WAKE = signal.SIGUSR1

    def __init__(self, on_signal: Callable[[Callable[[], None]], None]) -> None:
        self.on_signal = on_signal
        self.received: int | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="epochfs-signals", daemon=True)
        self._previous: set[int | signal.Signals] = set()
        self._previous_wake: Any = signal.SIG_DFL
        self._main = threading.get_ident()

    def __enter__(self) -> StopSignals:
        self._main = threading.get_ident()
        self._previous_wake = signal.signal(self.WAKE, _ignore_signal)
        self._previous = signal.pthread_sigmask(signal.SIG_BLOCK, self.SIGNALS)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(timeout=5)
        while signal.sigtimedwait(self.SIGNALS, 0) is not None:
            pass
        signal.pthread_sigmask(signal.SIG_SETMASK, self._previous)
        if not self._thread.is_alive():  # else a late wake() must still find the no-op handler
            signal.signal(self.WAKE, self._previous_wake)

    def wake(self) -> None:
        """Interrupt the main thread's wait (libfuse's loop checks its exit flag after it)."""
        signal.pthread_kill(self._main, self.WAKE)

    def _run(self) -> None:
        while not self._done.is_set():
            try:
                info = signal.sigtimedwait(self.SIGNALS, 0.25)
            except Exception:  # never let this thread die: the signals are blocked everywhere else
                log.exception("waiting for signals failed; waiting again")
                continue
            if info is None or self.received is not None:
                continue
            if info.si_signo not in self.SIGNALS:
                # After SIGSTOP/SIGCONT (a debugger, a cgroup freezer) the wait can return a struct
                # that holds no signal; taking it for one lost the SIGTERM that followed.
                log.debug("signal wait returned no stop signal (si_signo %d); waiting again", info.si_signo)
                continue
            self.received = info.si_signo
            log.info("%s: stopping", signal.Signals(info.si_signo).name)
            try:
                self.on_signal(self.wake)
            except Exception:
                log.exception("stopping the mount failed")


def _ignore_signal(signum: int, frame: object) -> None:
    """The wake-up signal only interrupts a wait; nothing to do."""


def run_mount(*, cache: Path, mount: Path, link_root: Path | None = None, warm_files: int = 200_000,
              fuse_api: str = "lowlevel") -> int:
    """Serve the epoch view of ``cache`` at ``mount`` until signalled (``epochfs mount``).

    ``link_root``: a read-only path to the cache's objects folder that epoch symlinks point into;
    default: a read-only bind mount made under the cache. ``fuse_api``: ``lowlevel`` (inode numbers
    computed, :mod:`epochfs.fuse.lowlevel`) or ``highlevel`` (mfusepy's path API). Plain arguments,
    not the CLI's settings type, since fuse imports only the store from sidecar.
    """
    mount = Path(os.path.abspath(mount))
    cache = Path(os.path.abspath(cache))
    check_mount_apart(mount, cache, link_root)
    check_mount_point(mount)
    libfuse = find_libfuse3()
    store = Store(cache, create=True)
    try:
        if link_root is None:
            link_root = cache / DEFAULT_LINK_ROOT_NAME
            make_readonly_bind(store.objects_dir, link_root)
        else:  # after the store: on a new volume it makes objects/, which the link root shows
            check_link_root(link_root)
            check_link_root_view(link_root, store.objects_dir)
    except MountError:
        store.close()
        raise
    os.environ["FUSE_LIBRARY_PATH"] = libfuse
    ops: EpochOperations | None = None
    # A request thread that waits for the GIL behind a tree build (a new epoch's first listing:
    # ~10 s of Python at 1M files) waits up to the switch interval at every step; a lookup that cut
    # an epoch took 0.6 s beside a build at the default 5 ms, 0.18 s at 0.5 ms (docs/scale.md).
    sys.setswitchinterval(SWITCH_INTERVAL)
    # mfusepy logs every callback it registers at DEBUG under "fuse"; keep ours readable.
    logging.getLogger("fuse").setLevel(max(logging.INFO, logging.getLogger().level))
    try:
        from epochfs.fuse.operations import EpochOperations
        from epochfs.fuse.view import View

        # The window as the index records it now; the sampler (started beside us) may record
        # another one in a moment: the refresher follows it (epochfs.fuse.inuse).
        in_use = store.policy().in_use_seconds
        view = View(store=store, link_root=Path(link_root), read_debounce=read_debounce(in_use))
        ops = EpochOperations(view=view, timeout=cache_timeout(in_use), mount=mount, warm_files=warm_files,
                              in_use_seconds=in_use)
        import mfusepy

        log.info("serving %s at %s (links into %s) with libfuse %d.%d from %s, %s API", cache, mount,
                 link_root, mfusepy.fuse_version_major, mfusepy.fuse_version_minor, libfuse,
                 "low-level" if fuse_api == "lowlevel" else "high-level")
        log.info("%s", describe(in_use))
        # libfuse splits options at commas: keep them out of the name shown by `mount`.
        fsname = view_source(cache)
        with StopSignals(_stop_unless_replaced(ops, mount)) as signals:
            try:
                if fuse_api == "lowlevel":
                    failed = _serve_lowlevel(ops, mount, fsname)
                else:
                    failed = _serve_highlevel(ops, mount, fsname)
            finally:
                ops.loop_ended()
            if failed is not None:
                log.error("mount failed at %s: %s", mount, failed)
                return 1
        if signals.received is None:
            log.info("FUSE loop ended without a signal (unmounted from outside)")
        return 0
    finally:
        # libfuse's teardown may have set SIGPIPE back to its default; once a killed supervisor's
        # end of our log pipe is closed, the next log line would kill us before the unmounts.
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        another = _unmount_own(mount, ops.made if ops is not None else None)
        # The default bind, whichever view made it (none: nothing); another server's view at our
        # mount point reads through it.
        release_link_root(cache, None if another else mount)
        store.close()


def _same(entry: MountEntry, made: MountEntry) -> bool:
    """Whether the mount table's ``entry`` is the mount this server made (its ID and device)."""
    return (entry.mount_id, entry.device) == (made.mount_id, made.device)


def _stop_unless_replaced(ops: EpochOperations, mount: Path) -> Callable[[Callable[[], None]], None]:
    """The stop on a signal: libfuse's session teardown (either API) unmounts by path, whatever
    is mounted there, unless it finds our connection already gone. A server taken for dead and replaced at its
    mount point (see :func:`_unmount_own`) whose detached mount is still held open would remove the
    new server's view on its way out: such a server exits at once instead (its own mount is
    detached already, and the cache's read-only bind stays for the new view)."""
    def stop(wake: Callable[[], None]) -> None:
        made = ops.made
        left = find_mount(mount)
        if made is not None and left is not None and left.fstype.startswith("fuse") and not _same(left, made):
            log.info("%s: the FUSE mount there is another server's now (mount %d); exiting without "
                     "libfuse's unmount", mount, left.mount_id)
            logging.shutdown()
            os._exit(0)
        ops.stop_serving(wake)
    return stop


def _unmount_own(mount: Path, made: MountEntry | None) -> bool:
    """Lazily unmount the FUSE mount left at ``mount`` if it is the one this server made; True when
    the FUSE mount there is another server's (left alone).

    A server that does not answer (stopped, wedged) is taken for dead by the next one at its mount
    point, which detaches the hung mount and mounts its own there under the same name: once the
    first goes on and exits, the mount at its path is the second's, and removing it left no view.
    Ours is the entry :meth:`~epochfs.fuse.operations.EpochOperations.start_serving` recorded when
    the mount came up (its mount ID and device), and dead: libfuse has closed our device by now,
    so its statfs fails at once. The kernel gives a freed mount's ID and device number to the next
    mount, so the ID alone could name the second's. A mount that never came up (nothing recorded)
    can leave only a FUSE mount of ours there: removed, as ever.
    """
    left = find_mount(mount)
    if left is None or not left.fstype.startswith("fuse"):
        return False
    if made is not None and (not _same(left, made) or not is_dead(mount, timeout=2.0)):
        log.info("%s: the FUSE mount there is another server's now (mount %d); leaving it", mount,
                 left.mount_id)
        return True
    lazy_unmount(mount, layers=1)  # ours only: one below it would be another server's
    return False


def _serve_highlevel(ops: EpochOperations, mount: Path, fsname: str) -> str | None:
    """Serve through mfusepy (libfuse's high-level API) until the loop ends; why the mount failed,
    or None. Its loop runs libfuse's default 10 request threads at most; the idle ones kept are
    capped as the low-level loop's are (:data:`~epochfs.fuse.lowlevel.IDLE_THREADS`), in case a
    libfuse raises that default."""
    from epochfs.fuse.lowlevel import IDLE_THREADS
    from epochfs.fuse.operations import EpochFUSE

    try:
        EpochFUSE(ops, str(mount), raw_fi=True, foreground=True, allow_other=True,
                  default_permissions=True, ro=True, fsname=fsname, subtype="epochfs",
                  max_idle_threads=IDLE_THREADS)
    except RuntimeError as e:
        # A failed mount leaves nothing mounted and is the only real error here; a loop that
        # ended otherwise (unmounted under us) is a stop.
        if find_mount(mount) is None and not _was_mounted(ops):
            return str(e)
        log.info("FUSE loop ended (libfuse status %s)", e)
    return None


def _serve_lowlevel(ops: EpochOperations, mount: Path, fsname: str) -> str | None:
    """Serve through libfuse's low-level API (:mod:`epochfs.fuse.lowlevel`) until the loop ends;
    why the mount failed, or None."""
    from epochfs.fuse.lowlevel import LowLevelFUSE, MountFailed
    from epochfs.fuse.lowlevel_abi import MissingCall

    options = f"allow_other,default_permissions,ro,fsname={fsname},subtype=epochfs"
    try:
        server = LowLevelFUSE(ops, mountpoint=str(mount), options=options)
    except MissingCall as e:
        log.warning("%s: serving through the high-level API instead", e)
        return _serve_highlevel(ops, mount, fsname)
    try:
        status = server.run()
    except MountFailed as e:
        return str(e)
    if status not in (0, None):
        log.info("FUSE loop ended (libfuse status %s)", status)
    return None


def _was_mounted(ops: EpochOperations) -> bool:
    """Whether libfuse's init ran (it starts the refresher): the mount was up at some point."""
    return ops.refresher.started
