"""Is the view alive? The probe of the mount, the FUSE mount's watch and remount, and the folder
publisher's liveness.

Its own module because it holds the supervisor's one rule about a hung FUSE server: a stat of a
hung mount blocks, so :func:`probe` runs it in a daemon thread it may leave behind, and leaves at
most one behind per path (a probe comes every few seconds). On that answer the watch decides to
remount: the server exited, the mount vanished, it answered ENOTCONN, or three probes in a row
failed; it then kills the server, removes the read-only bind of ``objects/`` it made (no server is
left to do it), lazily unmounts, moves aside what the folder then holds (:mod:`epochfs.fuse.strays`)
and mounts again, never stacking mounts. While the view answers,
the watch also checks that the link root shows ``objects/`` itself and makes the bind again when the
folder was removed and made anew (:meth:`MountWatch._watch_link_root`). The folder view has no
mount to probe: its publisher counts as hung when neither its ``status.json`` nor its CPU time
moved for 30 s (:mod:`.stall`), and is then killed and restarted the same way.
"""

from __future__ import annotations

import errno
import functools
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from epochfs.fuse import mounting, strays
from epochfs.fuse.errors import MountError
from epochfs.sidecar import kube
from epochfs.sidecar.config import ConfigError, SidecarSettings
from epochfs.sidecar.store.objects import OBJECTS_DIR
from epochfs.sidecar.supervisor.children import Child, ChildProcesses
from epochfs.sidecar.supervisor.stall import STUCK_AFTER, StallWatch, StatusKey, status_key
from epochfs.sidecar.volumes import check_view_folder
from epochfs.torchclient.layout import CONTROL_DIR, STATUS_NAME

log = logging.getLogger("epochfs.supervisor")

_stuck_probes: dict[str, threading.Thread] = {}
_stuck_lock = threading.Lock()


def probe(path: Path, *, timeout: float) -> str:
    """Stat and list ``path`` within ``timeout`` seconds: "ok", "dead" (ENOTCONN), "hung" or
    "error: ...". A stat of a hung FUSE server would block, so it runs in a daemon thread left
    behind if it never returns; while one is still stuck on ``path``, later probes answer "hung" at
    once instead of leaving one more thread each (probes come every few seconds)."""
    key = str(path)
    with _stuck_lock:
        stuck = _stuck_probes.get(key)
        if stuck is not None and stuck.is_alive():
            return "hung"
    result: list[str] = []

    def run() -> None:
        try:
            os.stat(path)
            os.listdir(path)
            result.append("ok")
        except OSError as e:
            dead = e.errno in (errno.ENOTCONN, errno.ECONNABORTED)
            result.append("dead" if dead else f"error: {e.strerror}")

    t = threading.Thread(target=run, name="epochfs-probe", daemon=True)
    t.start()
    t.join(timeout)
    if result:
        return result[0]
    with _stuck_lock:
        _stuck_probes[key] = t
    return "hung"


def _absolute_link_root(link_root: Path) -> None:
    """Refuse (MountError, as the FUSE view's own check words it) a relative ``--link-root``:
    the epochs' entries would point nowhere a reader can follow. A MountError so that the
    supervisor closes the store it opened before raising it on."""
    if not link_root.is_absolute():
        raise MountError(f"--link-root: {link_root} must be an absolute path")


class MountWatch(ChildProcesses):
    """The :class:`~epochfs.sidecar.supervisor.Supervisor`'s part that watches the view: the FUSE
    mount (``--view fuse``) or the folder publisher (``--view folder``). ``_mounted`` is what
    readiness reads: mounted and answering, or published."""

    settings: SidecarSettings
    mount: Path
    cache: Path
    stat_timeout: float
    fuse: Child
    publisher: Child
    folder_view: bool
    _mounted: bool
    _last_probe: str
    _probe_failures: int
    _link_root_problem: str | None = None
    """Why the epochs' link root does not show the cache's objects folder now and could not be
    made to (:meth:`_watch_link_root`); /healthz fails while it is set. None: it shows it."""
    _link_root_retry_at: float = 0.0
    LINK_ROOT_RETRY = 5.0
    """Seconds between tries to make the bind again after one failed (each try runs mount(8))."""
    _reporter: kube.Reporter | None

    if TYPE_CHECKING:
        @staticmethod
        def _safe(fn: Callable[..., Any], *args: Any) -> None: ...

    REMOUNT_BACKOFF_MAX = 2.0
    """The FUSE server's longest wait before a restart (:attr:`Child.max_backoff`): while it is
    down no new lookup in the view works."""

    def _fuse_mounted(self) -> bool:
        entry = mounting.find_mount(self.mount)
        return entry is not None and entry.fstype.startswith("fuse")

    def _view_mounted(self) -> bool:
        """Whether the view is up, as /readyz and /healthz tell it: the watch saw it answer
        (``_mounted``) and, for the FUSE view, a FUSE mount is at the mount point now (an empty
        folder where the mount was answers a stat as well as the mount did)."""
        return self._mounted and (self.folder_view or self._fuse_mounted())

    def _view_refused(self) -> str | None:
        """The reason the view's child gave for refusing its settings (:meth:`refused`) when it
        exited 2 at its start and is one that stops the sidecar on it; None otherwise."""
        view = self.publisher if self.folder_view else self.fuse
        if view.proc is not None or not view.stop_on_refusal:
            return None
        return self.refused(view)

    def _check_at_start(self, check: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``check(*args, **kwargs)``; its refusal (ConfigError, MountError: exit 2 with the line) is also
        written to the termination message, before any child starts: a child restarted for ever
        would only say it again."""
        try:
            return check(*args, **kwargs)
        except (ConfigError, MountError) as e:
            # Imported here: core imports this module (through health).
            from epochfs.sidecar.supervisor.core import write_termination_message

            write_termination_message(self.settings.termination_log, f"epochfs sidecar: {e}")
            raise

    def _check_mount(self) -> None:
        """The FUSE view's mount point, checked before the store is opened and any child starts:
        one over the cache or its objects, or one that cannot be used, is refused (what the
        FUSE server would refuse at every restart); a dead mount there is detached."""
        self._check_at_start(mounting.check_mount_apart, self.mount, self.cache, self.settings.link_root)
        self._check_at_start(mounting.check_mount_point, self.mount)

    def _check_link_root(self, objects: Path) -> None:
        """``--link-root``, checked once the store is open and before any child starts. Either
        view: an absolute path (the folder view's publisher refused a relative one at each of its
        restarts, for ever). The FUSE view's also: a folder, and a view of the cache's objects
        folder; not before the store: on a new volume ``objects/`` (and so a read-only mount's
        ``<it>/objects``) is made by it. The folder view's is where the trainer sees the objects,
        perhaps in its own container only: nothing more to check here."""
        if self.settings.link_root is None:
            return
        link_root = Path(self.settings.link_root)
        self._check_at_start(_absolute_link_root, link_root)
        if self.folder_view:
            return
        self._check_at_start(mounting.check_link_root, link_root, warn=False)  # the server warns
        self._check_at_start(mounting.check_link_root_view, link_root, objects)

    def _unmount_link_root(self) -> None:
        """The FUSE server removes the read-only bind when it stops, but one killed leaves it: the
        supervisor removes it at the end, unless another sidecar's view of the same cache still
        reads through it (:func:`~epochfs.fuse.mounting.release_link_root`)."""
        mounting.release_link_root(self.cache, self.mount)

    def _remount(self, reason: str) -> None:
        """The FUSE server died or its mount is dead: kill, detach, start again (no stacking)."""
        log.warning("FUSE view lost (%s): unmounting lazily and mounting again", reason)
        self._mounted = False
        if self._metrics is not None:
            self._metrics.mounted.set(0)
        proc = self.fuse.proc
        if proc is not None and proc.poll() is None:
            # Its end is this remount, logged above: not a crash, nor "a kill from outside".
            hung = reason == "mount answered hung"
            self.fuse.remount = f"the view was {'hung' if hung else 'lost'} ({reason})"
            proc.kill()
            try:
                proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                # Stuck in the kernel on its own mount: it dies once the mount is detached, or
                # never; either way a new server must not wait for it.
                log.error("FUSE server pid %d did not die after SIGKILL (stuck in the kernel); "
                          "detaching its mount and starting a new one", proc.pid)
                mounting.lazy_unmount(self.mount)
                self.fuse.proc = None
                self.fuse.last_exit = None
                self.fuse.next_start = time.monotonic() + self.fuse.backoff
        elif proc is not None and proc.returncode == 0 and not self.fuse.remount:
            # It ended by itself between the watch's look and this one, as a server whose mount
            # went away does: the same remount as one seen exited first (_watch_mount).
            self.fuse.remount = "its mount went away"
        self._reaped(self.fuse)  # schedules the restart after the fuse child's backoff, and logs it
        # No server is left to remove the bind it made when it stops: removed now, not at the
        # supervisor's clean stop only (a kill -9 of the supervisor before the restart left it
        # mounted for good). Before the mount point, so that a view found gone means this is done.
        self._unmount_link_root()
        if not mounting.lazy_unmount(self.mount):
            log.error("lazy unmount of %s failed; retrying before the next start", self.mount)
        else:
            self._move_strays()
        if self._reporter is not None:
            self._safe(self._reporter.on_remount)

    def _move_strays(self) -> None:
        """Before a restart: what the mount-point folder holds (written there while no view was
        mounted: a checkpoint retried through the restart) is moved aside, never deleted (renamed
        into ``<cache>/mount-strays/`` or beside the mount point, copied only where no rename
        reaches: :mod:`epochfs.fuse.strays`), where the restarted server would refuse the folder
        as not empty and the sidecar stopped for good. A first start still refuses it (a
        wrong ``--mount``). A move that fails is logged; the server then exits 2, a crash once it
        has served (:attr:`~.children.Child.served`), and the next restart tries again."""
        try:
            strays.move_strays(self.mount, self.cache)
        except (MountError, OSError) as e:
            log.error("%s; the FUSE server's restart will refuse the folder", e)

    def _watch_mount(self) -> None:
        proc = self.fuse.proc
        if self._mounted and proc is not None and proc.poll() == 0 and not self._fuse_mounted():
            # Its mount, seen up, went away (``epochfs unmount``, ``umount``) and it ended by
            # itself, as a FUSE server does: a remount, not a crash (:attr:`~.children.Child.remount`).
            self.fuse.remount = "its mount went away"
        if self._reaped(self.fuse):
            if self.fuse.stop_on_refusal and self.refused(self.fuse) is not None:
                return  # it refused its settings: the supervisor stops on it (core), no remount
            self._remount(f"FUSE server exited with status {self.fuse.last_exit}")
            return
        if not self.fuse.alive:
            return
        present = self._fuse_mounted()
        if not present:
            if self._mounted:
                self._remount("mount disappeared")
            return
        state = probe(self.mount, timeout=self.stat_timeout)
        self._last_probe = state
        if state == "ok":
            if not self._mounted:
                log.info("mounted %s", self.mount)
            self._mounted = True
            if self._metrics is not None:
                self._metrics.mounted.set(1)
            self._probe_failures = 0
            self.fuse.served = True  # its settings work: a later exit 2 is a crash, not a refusal
            self._watch_link_root()
            return
        self._probe_failures += 1
        if state == "dead" or self._probe_failures >= 3:
            self._remount(f"mount answered {state}")

    def _watch_link_root(self) -> None:
        """While the view is up, the link root its symlinks point into must show the cache's
        objects folder. A bind holds the folder it was made of, not its path: once ``objects/`` is
        removed (the sampler makes it again and repairs every sample into it) the default bind
        shows the deleted folder and every file of every epoch answers ENOENT. That bind is made
        again here; a ``--link-root`` (the user's mount) cannot be, and :attr:`_link_root_problem`
        says why for /healthz. Two stats a tick while all is well."""
        objects = self.cache / OBJECTS_DIR
        given = self.settings.link_root
        link_root = Path(given) if given is not None else self.cache / mounting.DEFAULT_LINK_ROOT_NAME
        if mounting.bind_shows(objects, link_root):
            if self._link_root_problem is not None:
                log.info("the link root %s shows %s again", link_root, objects)
            self._link_root_problem = None
            return
        problem: str | None
        if not objects.is_dir():
            problem = f"the cache's objects folder {objects} is missing (the sampler makes it again)"
        elif given is not None:
            try:
                mounting.check_link_root_view(link_root, objects)  # a view by its marker folder
                problem = None
            except MountError as e:
                problem = str(e)
        elif time.monotonic() < self._link_root_retry_at:
            return  # the last try failed a moment ago: its problem stands
        else:
            log.warning("the read-only bind %s does not show %s (removed and made again?): "
                        "making it again", link_root, objects)
            try:
                mounting.make_readonly_bind(objects, link_root)
                problem = None if mounting.bind_shows(objects, link_root) else \
                    f"the read-only bind {link_root} does not show {objects}"
                if problem is None:
                    log.info("the link root %s shows %s again", link_root, objects)
            except MountError as e:
                problem = str(e)
            if problem is not None:
                self._link_root_retry_at = time.monotonic() + self.LINK_ROOT_RETRY
        if problem != self._link_root_problem and problem is not None:
            log.error("epoch files cannot be read: %s", problem)
        self._link_root_problem = problem

    # ------------------------------------------------------------------ the folder view
    def _check_folder(self) -> None:
        """The folder view's folder: a folder (what a previous run published stays and is
        recovered) or a missing one, made here, whose parent is a folder; one the publisher could
        not use stops the sidecar with the reason, also in the termination message (a publisher
        restarted for ever would hide it)."""
        try:
            check_view_folder(self.mount, create=True, cache=self.cache)
        except ConfigError as e:
            # Imported here: core imports this module (through health).
            from epochfs.sidecar.supervisor.core import write_termination_message

            write_termination_message(self.settings.termination_log, f"epochfs sidecar: {e}")
            raise

    @functools.cached_property
    def _stall(self) -> StallWatch:
        """The publisher's signs of life (made on first use: a mixin has no __init__ of its own)."""
        return StallWatch()

    _view_hung: str | None = None
    """Why the view is not published although its publisher runs: it was killed hung and its
    next run has not rewritten ``status.json`` yet (/readyz's ``reason``). None otherwise."""

    def _watch_publisher(self) -> None:
        """Restart a dead publisher with backoff (what it published stays readable meanwhile);
        "mounted" is "published": the publisher runs, status.json is there, and the publisher is
        not hung. A hung one (:mod:`.stall`) is killed and restarted; the view counts as published
        again once its next run has rewritten status.json."""
        self._reaped(self.publisher)
        status = status_key(self.mount / CONTROL_DIR / STATUS_NAME)
        now, alive = time.monotonic(), self.publisher.alive
        stalled = self._stall.observe(self.publisher.pid if alive else None, status, now)
        if stalled is not None and not self.publisher.remount:
            self._kill_hung_publisher(stalled, status, now)
        elif alive and self.publisher.remount and self._stall.stuck(now):
            log.error("folder publisher pid %s still runs %.0f s after its SIGKILL: stuck in the kernel "
                      "(a call on the folder's volume that does not return); it is restarted once it "
                      "dies", self.publisher.pid, STUCK_AFTER)
        proven = self._stall.proven(status)
        if proven:
            self._view_hung = None
        published = self.publisher.alive and status is not None and proven and not self.publisher.remount
        if published != self._mounted:
            log.info("folder view %s %s", self.mount, "published" if published else "not published")
        self._mounted = published
        if self._metrics is not None:
            self._metrics.mounted.set(int(published))

    def _kill_hung_publisher(self, stalled: float, status: StatusKey, now: float) -> None:
        """SIGKILL the hung publisher; its exit is reaped and it restarts as after any exit,
        counted as no crash (:attr:`~.children.Child.remount`): its recovery handles a kill at
        any moment. A process stuck in the kernel (a write to a volume that does not answer) dies
        only once the call returns; until then no second publisher starts (the folder's lock)."""
        proc = self.publisher.proc
        assert proc is not None
        why = (f"status.json not rewritten and no CPU time used for {stalled:.0f} s; it rewrites it "
               f"every second")
        log.error("folder publisher pid %d hung (%s: stopped, deadlocked, or blocked on I/O): killing it "
                  "and starting it again; the folder view counts as not published until it publishes",
                  proc.pid, why)
        self.publisher.remount = f"the folder view was hung ({why})"
        self._view_hung = f"the folder view's publisher hung ({why}) and is being restarted"
        self._stall.killed(status, now)
        proc.kill()
