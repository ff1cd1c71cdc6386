"""The node volume's free space: the capacity the sampler can really use, and disk-full episodes.

``--capacity`` is a budget, not a promise that the volume has that much room: another tenant of
the disk, the index and its write-ahead log, or a budget larger than the filesystem can all leave
less. So the sampler plans with the *effective* capacity, ``min(--capacity, cached + temps +
free - margin)`` (bytes on the disk only: ``temps`` is what the downloads' temp files hold, never
what is reserved and not written yet), read from ``statvfs`` at most once a second, which makes
eviction start before the disk is full and lets sampling resume by itself when space comes back.
If a write fails with ENOSPC anyway (someone else filled the disk, or the index grew), the sampler
keeps the key and measures again at once: the smaller room makes it evict or, when nothing is
evictable, pause with "disk full" in status, metrics and an Event, until the free space comes
back. A volume out of inodes (fewer free than :data:`INODE_MARGIN`) has no room beyond what it
holds, whatever its free bytes: the same pause. It never crashes, and readers of existing epochs
never notice. An object bigger than the volume could hold even with an empty cache is skipped
(:meth:`DiskSpace.largest`).
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from epochfs.sidecar.config import ConfigError, format_size
from epochfs.sidecar.sampler.condlog import ConditionLog
from epochfs.sidecar.store.diskmargin import MARGIN_MIN, margin_for
from epochfs.sidecar.store.objects import TMP_DIR

log = logging.getLogger("epochfs.sampler")

CHECK_EVERY = 1.0
"""Seconds between statvfs calls."""

INODE_MARGIN = 16
"""Free inodes below which the volume counts as full whatever its free bytes: every download's
temp file takes one, and a volume of many small files (or a tmpfs with ``nr_inodes``) runs out of
them with bytes to spare. Measuring bytes only, the sampler saw room, sent a GET per try and found
every file refused (thousands of GETs a minute, "backpressure: no"). A few are kept for the
index's files and the folders new objects go in."""


def usable_free(st: os.statvfs_result, margin: int) -> int:
    """The free bytes a statvfs result offers the cache: none beyond ``margin`` (so no room beyond
    what is cached) where the volume is out of inodes. A filesystem that counts no inodes
    (``f_files`` 0: btrfs, many FUSE ones) is measured by its bytes alone."""
    free: int = st.f_bavail * st.f_frsize
    if st.f_files > 0 and st.f_favail < INODE_MARGIN:
        return min(free, margin)
    return free


def is_disk_full(exc: BaseException) -> bool:
    """ENOSPC / EDQUOT anywhere in the chain, or SQLite's "database or disk is full"."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if isinstance(e, sqlite3.OperationalError) and (
                getattr(e, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(e)):
            return True
        e = e.__cause__ or e.__context__
    return False


class DiskSpace:
    """Free space of the filesystem that holds the cache, and the capacity it allows."""

    def __init__(self, cache: Path, capacity: int) -> None:
        self.cache = cache
        self.capacity = capacity
        st = os.statvfs(cache)
        self.fs_bytes = 0
        self.margin = MARGIN_MIN
        self._size(st)
        self._free = usable_free(st, self.margin)
        self._checked = time.monotonic()
        self._room: int | None = None
        self._room_checked = self._checked
        """The measurement :attr:`_room` was computed from."""
        self.limited = False
        """The last effective capacity was below ``--capacity``: the disk, not the budget, bounds
        the cache (a pause now is "disk full", not "cache full")."""
        self.episode = ConditionLog(log)
        """The lines of a volume short of room: a refused write or a clamped budget is met many
        times a second while it lasts, and said at its start, at most once a minute while it
        lasts and changes, and at its end."""
        self._refused = 0
        """Writes refused as full since the last line about the volume."""
        self._refused_error = ""
        self._refused_unmeasured = False
        """A write was refused since the last statvfs: the volume counts as short until then."""
        self._measured = (0, self._free)
        """(cached, free) of the last measurement, for the lines."""
        self._said_room: int | None = None
        """The room the last line gave (a move of over 1% of --capacity is said again)."""

    def _size(self, st: os.statvfs_result) -> None:
        """The filesystem's size and the margin it sets, measured with its free space: a volume
        grown under the sampler (a tmpfs remounted larger, an expanded PVC) can hold samples that
        the size at the start said never fit (:meth:`largest`)."""
        self.fs_bytes = st.f_blocks * st.f_frsize
        self.margin = margin_for(self.fs_bytes)

    def free(self) -> int:
        now = time.monotonic()
        if now - self._checked >= CHECK_EVERY:
            st = os.statvfs(self.cache)
            self._size(st)
            self._free = usable_free(st, self.margin)
            self._checked = now
        return self._free

    def largest(self) -> int:
        """The most the cache could ever hold on this volume, even empty: an object bigger than
        this never fits, so waiting for room for it would stop sampling for good (measured again
        with the free space, at most once a second)."""
        self.free()
        return max(0, min(self.capacity, self.fs_bytes - self.margin))

    def check_schedule_fits(self) -> None:
        """Schedule mode: refuse (:class:`ConfigError`, exit 2) a --capacity the volume could never
        hold, even empty.

        Every node cuts epoch N from the same window of the shared order, trimmed to the epoch
        budget that --capacity gives, which is what makes the epochs the same on every node. A
        node that planned within its smaller volume instead would trim other windows and cut other
        epochs than the rest, silently; one that kept the budget would wait for a window that
        never fits, and epoch 0 would never be cut."""
        if self.largest() >= self.capacity:
            return
        raise ConfigError(
            f"--capacity: {format_size(self.capacity)} is more than the cache's filesystem can hold "
            f"({format_size(self.largest())}: a {format_size(self.fs_bytes)} filesystem, "
            f"{format_size(self.margin)} kept free for the index); --schedule cuts every node's "
            "windows from --capacity, so that the epochs are the same on every node: lower "
            f"--capacity to at most {format_size(self.largest())} (the same on every node) or give "
            "the cache a larger volume")

    @property
    def refusing(self) -> bool:
        """A write was refused as full since the last measurement: writes that can wait do."""
        return self._refused_unmeasured

    def effective_capacity(self, cached: int) -> int:
        """The budget the sampler can fill; ``cached`` is the bytes of its admitted samples.

        Only bytes already on the disk go with ``free``: a reservation's bytes are not written yet,
        so adding them to the free space (which does not count them yet) would raise the room by
        them at each check and let the sampler reserve more than the volume holds. ``cached +
        free`` is taken at one moment (samples admitted since fill the disk as they grow
        ``cached``, so the sum holds between two checks). The bytes the downloads' temp files
        already hold are added back: they are on the disk and already reserved, and without them
        the room would dip by what is being written at each check. What the index and other files
        take shows as less free space at the next check."""
        free = self.free()
        if self._room is None or self._room_checked != self._checked:  # (measured by any caller)
            self._room_checked = self._checked
            self._room = cached + self._temp_bytes() + free - self.margin
            self._measured = (cached, free)
            self._refused_unmeasured = False
        room = self._room
        self.limited = room < self.capacity
        self._tell(start=self._clamped_line)
        return max(0, min(self.capacity, room))

    def _tell(self, *, start: Callable[[], str]) -> None:
        """Give the volume's state to :attr:`episode` (which says it when a line is due)."""
        room = self._room
        moved = (room is not None and self._said_room is not None
                 and abs(room - self._said_room) > self.capacity // 100)
        self.episode.update(self.limited or self._refused_unmeasured,
                            material=moved or self._refused > 0, start=start,
                            still=self._still_line, end=self._room_line)

    def _said(self) -> None:
        """A line about the volume was built: what the next one compares with."""
        self._said_room = self._room
        self._refused = 0

    def _clamped_line(self) -> str:
        self._said()
        cached, free = self._measured
        return (f"--capacity {self.capacity} bytes is more than the cache's filesystem can hold now "
                f"({cached} cached, {free} free, {self.margin} kept free): sampling within "
                f"{max(0, self._room or 0)} bytes while that lasts (said again at most once a minute "
                "while it changes, and when it ends)")

    def _full_line(self) -> str:
        error = self._refused_error
        self._said()
        return (f"the cache's filesystem is full ({error}): key kept, budget measured again (said "
                "again at most once a minute while it lasts, and when it ends)")

    def _still_line(self) -> str:
        refused, error = self._refused, self._refused_error
        self._said()
        cached, free = self._measured
        line = (f"the cache's filesystem is still short of room: sampling within "
                f"{max(0, min(self.capacity, self._room or 0))} bytes of --capacity {self.capacity} "
                f"({cached} cached, {free} free, {self.margin} kept free)")
        if refused:
            line += f"; {refused} write(s) refused as full since the last line (last: {error})"
        return line

    def _room_line(self) -> str:
        self._said()
        return (f"the cache's filesystem has room for --capacity {self.capacity} bytes again "
                f"({self._measured[1]} free): sampling within --capacity")

    def _temp_bytes(self) -> int:
        """Bytes on the disk in the cache's temp folder (downloads written, not admitted yet). A
        temp is renamed into the cache before its admission is counted, so none counts twice."""
        total = 0
        try:
            with os.scandir(self.cache / TMP_DIR) as entries:
                for entry in entries:
                    try:
                        total += entry.stat(follow_symlinks=False).st_blocks * 512
                    except FileNotFoundError:  # admitted or removed meanwhile
                        continue
        except FileNotFoundError:
            return 0
        return total

    def filled(self, error: BaseException) -> None:
        """A write hit a full disk: measure again before the next reservation. Met once per
        write tried while the volume stays full: logged by :attr:`episode`, not per call."""
        self._checked = 0.0
        self._refused += 1
        self._refused_error = str(error)
        self._refused_unmeasured = True
        self._tell(start=self._full_line)
