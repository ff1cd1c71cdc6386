"""Count samples and bytes served, from opens of object files, without entering the data path.

Trainers read sample bytes straight from the node volume (the epoch entries are symlinks to the
object files), so no epochfs process sees the reads. The kernel's fanotify API reports every open of
a file to a listener without slowing the open (notification class, no permission events). We mark
the fan-out folders ``objects/xx/`` as *inodes* with ``FAN_EVENT_ON_CHILD``: an inode mark sees opens
through every mount of the volume (the trainer's own bind mount, the read-only link root), where a
mount mark would only see the sidecar's. Each open counts as one sample served and its file size as
bytes served (whole-file reads assumed). Repeat epochs served from the page cache still open the
files, so they count too.

epochfs's own reads are not served samples: the sampler's scrub, ``epochfs verify``, the listing
process. Each event carries the pid of the process that opened the file (its thread group: a scrub
thread reports the sampler's pid), and :class:`OwnProcesses` leaves out the opens of the watcher's
descendants (the supervisor's children and theirs) and of ``epochfs`` commands (``/proc/<pid>``:
the console script, ``python -m epochfs.sidecar.cli``, the listing process by its name). The verdict
on a pid is taken while it runs (the counter reads a wake-up's first events at once, before it
gathers) and kept with the process's start time, so the opens it made just before it exited are
still left out; a pid of another PID namespace (a trainer container's, reported as 0) counts.

Limits, documented in docs/metrics.md: fanotify merges identical queued events (same file, same
process) that we have not read yet, so a process re-opening one file in a tight loop may count
once. The 256 hex fan-out folders are made and marked at start; any other folder, or one removed
and made again (``objects/`` deleted under a running sidecar, then repaired: a new inode; the
kernel drops the old one's mark with it), is marked at the next rescan (every supervisor tick).
Needs CAP_SYS_ADMIN (the sidecar is privileged for FUSE anyway); without it :meth:`OpenCounter.start`
returns False and the served counters stay at zero (the torch client's report still gives
``epochfs_client_*``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import select
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from epochfs.sidecar import procfs
from epochfs.sidecar.folderstamp import FolderStamp
from epochfs.sidecar.procfs import PROC

log = logging.getLogger("epochfs.served")

FAN_CLASS_NOTIF = 0x0
FAN_CLOEXEC = 0x1
FAN_NONBLOCK = 0x2
FAN_UNLIMITED_QUEUE = 0x10
FAN_MARK_ADD = 0x1
FAN_OPEN = 0x20
FAN_EVENT_ON_CHILD = 0x08000000
FAN_Q_OVERFLOW = 0x4000
FAN_NOFD = -1
AT_FDCWD = -100
CLI_MODULES = frozenset({"epochfs.sidecar.cli"})
"""``python -m`` modules that are the epochfs command line (the console script is ``epochfs``)."""
OWN_NAMES = frozenset({"epochfs", "epochfs-listing"})
"""``/proc/<pid>/comm`` of epochfs's own processes, matched exactly: the console script's, and the
listing process's (:data:`epochfs.sidecar.listing.child.NAME`). Not a prefix: a trainer script
its user named ``epochfs-train.py`` (comm ``epochfs-train.p``) is a reader like any other."""
FORGET_AFTER = 256
"""Verdicts kept before the ones of exited processes are dropped (after a drain of the queue)."""
_EVENT = struct.Struct("IBBHQii")  # event_len, vers, reserved, metadata_len, mask, fd, pid
GATHER_SECONDS = 0.05
"""How long the counter lets open events queue after a wake-up before it reads them: the counts lag
by that much, and a reader's thousand opens a second cost tens of wake-ups, not a thousand."""


def is_epochfs_command(comm: str, argv: list[str]) -> bool:
    """Whether a process of this name (``/proc/<pid>/comm``) and command line runs the epochfs
    command line (``epochfs verify``...) or is a process epochfs named (:data:`OWN_NAMES`). A
    trainer importing the torch client runs its own script: it is a reader like any other."""
    if comm in OWN_NAMES:  # the console script's name, or the one the listing process sets
        return True
    if any(os.path.basename(a) == "epochfs" for a in argv[:2]):  # [python, .../bin/epochfs, ...]
        return True
    rest = iter(argv[1:])
    for arg in rest:  # python [-P -X opt ...] -m epochfs.sidecar.cli ...
        if arg == "-m":
            return next(rest, "") in CLI_MODULES
        if arg in ("-X", "-W"):  # an option's value follows
            next(rest, None)
        elif not arg.startswith("-"):  # a script (or -c's code): its own arguments follow
            return False
    return False


def _runs_epochfs(pid: int, proc: Path) -> bool:
    """:func:`is_epochfs_command` of a running process (False once it is gone)."""
    try:
        comm = (proc / str(pid) / "comm").read_text().strip()
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return False
    return is_epochfs_command(comm, [os.fsdecode(a) for a in raw.split(b"\0") if a])


def _kernel_id(inode: tuple[int, int]) -> tuple[int, int]:
    """(device, inode) of a stat as the kernel's fdinfo writes it (``sdev``: the kernel's own
    dev_t encoding, major << 20 | minor, not the one stat returns)."""
    return (os.major(inode[0]) << 20) | os.minor(inode[0]), inode[1]


def _live_marks(fd: int) -> set[tuple[int, int]] | None:
    """(sdev, inode) of every inode the fanotify group ``fd`` has a mark on, from
    ``/proc/self/fdinfo``: the kernel drops a mark with its inode, so a folder deleted under the
    counter leaves this set. None when it cannot be read (the marks are then trusted by name and
    inode number)."""
    try:
        text = Path(f"/proc/self/fdinfo/{fd}").read_text()
    except OSError:
        return None
    live = set()
    for line in text.splitlines():
        if not line.startswith("fanotify ino:"):
            continue
        fields = dict(f.split(":", 1) for f in line.split()[1:] if ":" in f)
        try:
            live.add((int(fields["sdev"], 16), int(fields["ino"], 16)))
        except (KeyError, ValueError):
            continue
    return live


class OwnProcesses:
    """Tells epochfs's own processes from everyone else's, by pid, for :class:`OpenCounter`.

    Ours: a descendant of ``root`` (the supervisor: the sampler with its scrub thread, its listing
    process, the FUSE server, the publisher), or an epochfs command (:func:`is_epochfs_command`).
    ``root`` itself is not: the process that runs the counter may read samples (a benchmark, a test).
    A verdict is kept with the process's start time: a pid reused by another process is looked at
    again, and the events a process queued just before it exited keep the verdict it had alive.
    """

    def __init__(self, root: int | None = None, *, proc: Path = PROC) -> None:
        self.root = os.getpid() if root is None else root
        self.proc = proc
        self._verdicts: dict[int, tuple[int, bool]] = {}

    def __len__(self) -> int:
        return len(self._verdicts)

    def ours(self, pid: int) -> bool:
        if pid <= 0 or pid == self.root:  # 0: a process of another PID namespace
            return False
        stat = procfs.stat(pid, self.proc)
        kept = self._verdicts.get(pid)
        if stat is None:  # exited: what it was while it ran (unknown: counted)
            return kept is not None and kept[1]
        if kept is not None and kept[0] == stat.start:
            return kept[1]
        verdict = self._descends(stat.ppid) or _runs_epochfs(pid, self.proc)
        self._verdicts[pid] = (stat.start, verdict)
        return verdict

    def _descends(self, ppid: int) -> bool:
        for _ in range(64):  # a bound, not a depth any process tree reaches
            if ppid == self.root:
                return True
            if ppid <= 1:
                return False
            stat = procfs.stat(ppid, self.proc)
            if stat is None:
                return False
            ppid = stat.ppid
        return False

    def exited(self) -> set[int]:
        """Pids with a verdict whose process is gone (or replaced)."""
        gone = set()
        for pid, (started, _) in self._verdicts.items():
            stat = procfs.stat(pid, self.proc)
            if stat is None or stat.start != started:
                gone.add(pid)
        return gone

    def forget(self, pids: set[int]) -> None:
        """Drop these verdicts: call after a drain that began once they had exited (their events
        were all queued before it, so none is left to judge)."""
        for pid in pids:
            self._verdicts.pop(pid, None)


class OpenedObjects(Protocol):
    """What the counter tells of the object files it counts opens of, besides the counts: their
    names (:class:`~epochfs.sidecar.served_pins.ReadRecords`, which keeps their epochs in use)."""

    def wanted(self) -> bool:
        """Whether names are wanted now (reading an open's name is a system call per open)."""

    def add(self, names: list[str]) -> None:
        """The names (sample ids) of a batch of opens counted."""

    def tick(self) -> None:
        """Called from the counter's thread at least every 0.2 s, opens or not."""


class OpenCounter:
    """A thread that counts opens of files in ``objects_dir``'s fan-out folders, except those made
    by epochfs's own processes (``own``; default: :class:`OwnProcesses` of this process).

    ``on_open(samples, nbytes)`` and ``on_lost(events)`` are called from the thread with batches,
    and ``objects`` (optional) is given the opened files' names.
    """

    def __init__(
        self,
        *,
        objects_dir: Path,
        on_open: Callable[[int, int], None],
        on_lost: Callable[[int], None] | None = None,
        precreate: bool = True,
        gather_seconds: float = GATHER_SECONDS,
        own: OwnProcesses | None = None,
        objects: OpenedObjects | None = None,
    ) -> None:
        self.objects_dir = Path(objects_dir)
        self._objects = objects
        self.precreate = precreate
        self.gather_seconds = gather_seconds
        self._on_open = on_open
        self._on_lost = on_lost or (lambda n: None)
        self.own = own if own is not None else OwnProcesses()
        self._forget_at = FORGET_AFTER
        self._fd = -1
        self._marked: dict[str, tuple[int, int]] = {}
        """Folder name -> (device, inode) of the folder marked under that name."""
        self._stamp = FolderStamp(self.objects_dir)
        self._fdinfo: bool | None = None
        """Whether the kernel lists this group's marks in fdinfo (None: not known yet)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._libc: ctypes.CDLL | None = None

    def start(self) -> bool:
        """Set up fanotify and start counting; False (with a warning) when the kernel refuses."""
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.fanotify_init.argtypes = [ctypes.c_uint, ctypes.c_uint]
            libc.fanotify_mark.argtypes = [
                ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p,
            ]
        except (OSError, AttributeError) as e:
            log.warning("served-bytes counting off: no fanotify in this libc (%s)", e)
            return False
        flags = FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK | FAN_UNLIMITED_QUEUE
        fd = libc.fanotify_init(flags, os.O_RDONLY | os.O_LARGEFILE | os.O_CLOEXEC)
        if fd < 0:
            err = ctypes.get_errno()
            log.warning("served-bytes counting off: fanotify_init: %s (needs CAP_SYS_ADMIN)",
                        os.strerror(err))
            return False
        self._libc, self._fd = libc, fd
        if self.precreate:
            # Sample ids are hex digests, so objects/ holds at most 256 fan-out folders. Making
            # them now (empty folders are harmless to the store) marks every one before the first
            # object lands, so no open slips through between a folder's creation and a rescan.
            for i in range(256):
                (self.objects_dir / f"{i:02x}").mkdir(parents=True, exist_ok=True)
        self.rescan()
        self._thread = threading.Thread(target=self._run, name="epochfs-served", daemon=True)
        self._thread.start()
        return True

    def rescan(self) -> int:
        """Mark fan-out folders that appeared, or were made again under the same name, since the
        last scan (none when ``objects/`` did not change: :class:`.FolderStamp`); how many.

        A folder counts as marked while the kernel holds a mark on its inode (:func:`_live_marks`):
        a folder removed and made again is a new inode, and often has the old one's number
        (ext4 hands a freed inode number out again at once), so neither its name nor its
        (device, inode) tells it from the folder that was marked."""
        if self._fd < 0 or self._libc is None or (stamp := self._stamp.look()) is None:
            return 0
        added = failed = 0
        try:
            entries = list(os.scandir(self.objects_dir))
        except FileNotFoundError:
            return 0
        live = _live_marks(self._fd) if self._fdinfo is not False else None
        marked: dict[str, tuple[int, int]] = {}
        for entry in entries:
            try:
                if not entry.is_dir(follow_symlinks=False):
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError:  # gone meanwhile
                continue
            inode = (st.st_dev, st.st_ino)
            if self._marked.get(entry.name) == inode and (live is None or _kernel_id(inode) in live):
                marked[entry.name] = inode
                continue
            rc = self._libc.fanotify_mark(
                self._fd, FAN_MARK_ADD, FAN_OPEN | FAN_EVENT_ON_CHILD, AT_FDCWD, os.fsencode(entry.path)
            )
            if rc == 0:
                marked[entry.name] = inode
                added += 1
            else:
                failed += 1
                log.warning("fanotify_mark %s: %s", entry.path, os.strerror(ctypes.get_errno()))
        self._marked = marked
        self._stamp.scanned(None if failed else stamp)  # a refused mark is tried at every look
        if added and self._fdinfo is None:  # a kernel that does not list them: trust the names
            self._fdinfo = bool(_live_marks(self._fd))
        if added:
            log.info("watching opens in %d object folder(s) (+%d)", len(self._marked), added)
        return added

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        while not self._stop.is_set():
            self._tick()
            if not poller.poll(200):
                continue
            # Read the first opens at once: their processes are looked at (OwnProcesses) while they
            # run, even an `epochfs verify` that opens a few objects and exits.
            if not self._drain():
                return
            # Then let the opens of a moment queue up (the kernel's queue is unlimited) and read
            # them all: a reader opens a sample every millisecond or so, and one wake-up per open
            # cost this thread about 50 us of CPU each, taken from the reader's decoding workers.
            self._stop.wait(self.gather_seconds)  # at once on stop: what queued is still counted
            if not self._drain():
                return

    def _tick(self) -> None:
        if self._objects is None:
            return
        try:
            self._objects.tick()
        except Exception:  # a bookkeeping write: never the end of the counting
            log.exception("recording the epochs of opened objects")

    def _drain(self) -> bool:
        """Read and count every queued event; False when the counter was stopped meanwhile."""
        exited: set[int] = set()
        if len(self.own) > self._forget_at:  # pids come and go (a loader's workers, each epoch)
            exited = self.own.exited()
            self._forget_at = max(FORGET_AFTER, 2 * (len(self.own) - len(exited)))
        while True:  # until the queue is empty
            try:
                buf = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                break
            except OSError as e:
                if self._stop.is_set():
                    return False
                log.warning("fanotify read: %s", e)
                break
            self._consume(buf)
        self.own.forget(exited)  # gone before this drain began: their events were all in it
        return True

    def _consume(self, buf: bytes) -> None:
        samples = nbytes = lost = 0
        offset = 0
        ours: dict[int, bool] = {}  # one look at /proc per process and batch, not per open
        names: list[str] | None = [] if self._objects is not None and self._objects.wanted() else None
        while offset + _EVENT.size <= len(buf):
            length, _vers, _res, _mlen, mask, fd, pid = _EVENT.unpack_from(buf, offset)
            offset += max(length, _EVENT.size)
            if mask & FAN_Q_OVERFLOW or fd == FAN_NOFD:
                lost += 1
                continue
            try:
                if pid not in ours:
                    ours[pid] = self.own.ours(pid)
                if ours[pid]:  # the scrub, `epochfs verify`: not a sample served
                    continue
                st = os.fstat(fd)
                samples += 1
                nbytes += st.st_size
                if names is not None:  # the sample id: the object file's name
                    path = os.readlink(f"/proc/self/fd/{fd}").removesuffix(" (deleted)")
                    names.append(os.path.basename(path))
            except OSError:
                pass
            finally:
                os.close(fd)
        if samples:
            self._on_open(samples, nbytes)
        if names:
            assert self._objects is not None
            self._objects.add(names)
        if lost:
            self._on_lost(lost)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
