"""Count samples and bytes served, from opens of object files, without entering the data path.

Trainers read sample bytes straight from the node volume (the epoch entries are symlinks to the
object files), so no epochfs process sees the reads. The kernel's fanotify API reports every open of
a file to a listener without slowing the open (notification class, no permission events). We mark
the fan-out folders ``objects/xx/`` as *inodes* with ``FAN_EVENT_ON_CHILD``: an inode mark sees opens
through every mount of the volume (the trainer's own bind mount, the read-only link root), where a
mount mark would only see the sidecar's. Each open counts as one sample served and its file size as
bytes served (whole-file reads assumed). Repeat epochs served from the page cache still open the
files, so they count too.

Limits, documented in docs/metrics.md: fanotify merges identical queued events (same file, same
process) that we have not read yet, so a process re-opening one file in a tight loop may count
once. The 256 hex fan-out folders are made up front and marked at start; any other folder that
appears is marked at the next rescan (the supervisor rescans every tick).
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
_EVENT = struct.Struct("IBBHQii")  # event_len, vers, reserved, metadata_len, mask, fd, pid
GATHER_SECONDS = 0.05
"""How long the counter lets open events queue after a wake-up before it reads them: the counts lag
by that much, and a reader's thousand opens a second cost tens of wake-ups, not a thousand."""


class OpenCounter:
    """A thread that counts opens of files in ``objects_dir``'s fan-out folders.

    ``on_open(samples, nbytes)`` and ``on_lost(events)`` are called from the thread with batches.
    """

    def __init__(
        self,
        *,
        objects_dir: Path,
        on_open: Callable[[int, int], None],
        on_lost: Callable[[int], None] | None = None,
        precreate: bool = True,
        gather_seconds: float = GATHER_SECONDS,
    ) -> None:
        self.objects_dir = Path(objects_dir)
        self.precreate = precreate
        self.gather_seconds = gather_seconds
        self._on_open = on_open
        self._on_lost = on_lost or (lambda n: None)
        self._fd = -1
        self._marked: set[str] = set()
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
        """Mark fan-out folders that appeared since the last scan; returns how many were added."""
        if self._fd < 0 or self._libc is None:
            return 0
        added = 0
        try:
            entries = list(os.scandir(self.objects_dir))
        except FileNotFoundError:
            return 0
        for entry in entries:
            if entry.name in self._marked or not entry.is_dir(follow_symlinks=False):
                continue
            rc = self._libc.fanotify_mark(
                self._fd, FAN_MARK_ADD, FAN_OPEN | FAN_EVENT_ON_CHILD, AT_FDCWD, os.fsencode(entry.path)
            )
            if rc == 0:
                self._marked.add(entry.name)
                added += 1
            else:
                log.warning("fanotify_mark %s: %s", entry.path, os.strerror(ctypes.get_errno()))
        if added:
            log.info("watching opens in %d object folder(s) (+%d)", len(self._marked), added)
        return added

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        while not self._stop.is_set():
            if not poller.poll(200):
                continue
            # Let the opens of a moment queue up (the kernel's queue is unlimited), then read them
            # all: a reader opens a sample every millisecond or so, and one wake-up per open cost
            # this thread about 50 us of CPU each, taken from the reader's decoding workers.
            self._stop.wait(self.gather_seconds)  # at once on stop: what queued is still counted
            while True:  # until the queue is empty
                try:
                    buf = os.read(self._fd, 64 * 1024)
                except BlockingIOError:
                    break
                except OSError as e:
                    if self._stop.is_set():
                        return
                    log.warning("fanotify read: %s", e)
                    break
                self._consume(buf)

    def _consume(self, buf: bytes) -> None:
        samples = nbytes = lost = 0
        offset = 0
        while offset + _EVENT.size <= len(buf):
            length, _vers, _res, _mlen, mask, fd, _pid = _EVENT.unpack_from(buf, offset)
            offset += max(length, _EVENT.size)
            if mask & FAN_Q_OVERFLOW or fd == FAN_NOFD:
                lost += 1
                continue
            try:
                st = os.fstat(fd)
                samples += 1
                nbytes += st.st_size
            except OSError:
                pass
            finally:
                os.close(fd)
        if samples:
            self._on_open(samples, nbytes)
        if lost:
            self._on_lost(lost)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
