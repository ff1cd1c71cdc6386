"""Room in the cache for the fetch loop's next download, and the backpressure it raises when none.

The loop asks once per object, so the answer reads nothing but memory while there is room: the
cache's total as the reservations keep it (:class:`Reservations`, which read the index's counter
again after each look at the store) and the disk's free space as :class:`DiskSpace` last measured
it (once a second); the capacity is written to the store only when the disk moves it by more than
1%, and the backpressure only when its reason differs from what the index holds (at the start,
what a run killed while paused left: cleared at once, :meth:`Room._take_over`); either is tried
again at the next call until the index took it (a volume filled to its last byte refuses the
write). The backpressure shows at once in the sampler's own gauges
(:class:`~epochfs.sidecar.metrics_sampler.PauseGauges`), which need no room on the disk.

A repair in place takes no room (:meth:`Room.reserve_repair`): its bytes are counted already. In
schedule mode the capacity is never recorded lower (every node's windows come from --capacity),
and a window that can never be cached beside the kept epochs is named in the backpressure reason
(:meth:`Room.full`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from epochfs.sidecar.config import SamplerSettings, format_size
from epochfs.sidecar.metrics_sampler import pause_gauges
from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.sampler.condlog import ConditionLog, RepeatLog
from epochfs.sidecar.sampler.diskspace import DiskSpace
from epochfs.sidecar.sampler.stuckwindow import StuckWindows
from epochfs.sidecar.sampler.turnshare import TurnShare, within_budget
from epochfs.sidecar.store import Admission, Candidate, Meta, Store
from epochfs.sidecar.store.stats import CACHE_FULL, DISK_FULL

log = logging.getLogger("epochfs.sampler")


_HOLDS_NOTHING = f"{DISK_FULL}: the cache's filesystem can hold no sample"
"""How the backpressure reason begins while the volume is too small for any key (status and the
``epochfs_disk_full`` gauge read it as a full disk: more room is the way out)."""


class Unfit(enum.IntEnum):
    """:meth:`Room.skip_unfittable`'s answer (false: the key may be fetched)."""

    FITS = 0
    SKIPPED = 1
    """Skipped and counted: the loop goes on to the next key."""
    WAIT = 2
    """The volume can hold nothing now: the loop keeps the key and looks again after a poll."""


@dataclass(frozen=True)
class DiskFull:
    """A download or admission of ``candidate`` that found the node volume full (its key is kept
    and fetched again once there is room)."""

    candidate: Candidate
    error: BaseException
    released: bool = False
    """The admitter's: its reservation is already given back and it is no longer in flight, so
    the loop leaves both alone (the key may be in flight again by then, as another download)."""


class Room:
    """The loop's reservations against the effective capacity, and the backpressure it reports."""

    def __init__(self, *, store: Store, reservations: Reservations, disk: DiskSpace,
                 settings: SamplerSettings, write: Callable[[Callable[[], Any]], Any]) -> None:
        """``write``: the loop's store write (a full disk pauses sampling instead of ending it)."""
        self.store = store
        self.reservations = reservations
        self.disk = disk
        self.settings = settings
        self._write = write
        self._recorded_capacity = settings.capacity
        self._schedule_warned = False
        self._stuck = StuckWindows(store=store, reservations=reservations, settings=settings)
        """Schedule mode: the windows that can never be cached beside the kept epochs."""
        self._turn = TurnShare(store=store, reservations=reservations, settings=settings)
        """Snapshot mode: the bytes fetched above the newest epoch, against the turn's share."""
        self._unreserved: dict[str, int] = {}
        """Keys in flight with no reservation: repairs in place (:meth:`reserve_repair`)."""
        self.backpressure: str | None = None
        """Why the loop waits for room (:data:`CACHE_FULL`, :data:`DISK_FULL`), None while it
        does not."""
        self._recorded_backpressure: str | None = None
        """The reason the index holds: it may lag :attr:`backpressure` while the volume is too
        full for the index to be written (tried again at each call until it is)."""
        self._skip_lines = (RepeatLog(log), RepeatLog(log))
        """The lines of keys skipped as over the object limit, and as more than the volume can
        hold: met again at each pass and relist (the skip itself is counted once a key)."""
        self._fit_known: tuple[tuple[int, int], bool] | None = None
        """(largest, whether a key fits in it): :meth:`_holds_nothing`'s read of the catalog."""
        self._paused = ConditionLog(log)
        """The lines of the pauses: at the start, once a minute while it flaps or changes reason,
        at the end."""
        self._take_over()

    def reserve(self, cand: Candidate, *, lookahead: bool) -> bool:
        """Reserve room for ``cand``; a look-ahead download only takes room that is free.

        Evicting for the next window could take samples of the window before it that were
        fetched ahead of their cut and are not in an epoch yet. An eviction is an index write: on
        a full volume it meets SQLITE_FULL, which is no room now (the loop's write pauses
        sampling), not a failed index (the 600 s soak: a cut made samples evictable while the
        volume was full, and the sampler exited 1).

        While the disk bounds the budget, the volume is measured again (at most once a second)
        before ``cand`` is judged against the budget recorded: past that budget, with an epoch
        live, the download is refused before the volume is looked at, so room freed or added
        would otherwise stay "disk full" (nothing fetched) until the next cut.
        """
        if self.disk.limited:
            self._record_capacity(self.disk.effective_capacity(self.reservations.cache_bytes()))
        ok = self._free_room_allowed(cand) and self._reserved(cand.size, evict=False)
        if not ok and not lookahead and self._turn.left(cand.size, self._recorded_capacity):
            ok = self._reserved(cand.size, evict=True)
        if ok:
            self._turn.taken(cand.size)
        return ok

    def _reserved(self, size: int, *, evict: bool) -> bool:
        """Reserve ``size`` bytes within the room the disk allows now, and record the budget this
        reservation was judged against (only then: an older one would undo a newer measurement)."""
        ok = self._write(lambda: self.reservations.reserve(
            size, capacity=self.disk.effective_capacity, evict=evict))
        if self.reservations.capacity is not None:
            self._record_capacity(self.reservations.capacity)
        return bool(ok)

    def _free_room_allowed(self, cand: Candidate) -> bool:
        """Whether ``cand`` may take room that is free: up to the epoch budget without limit,
        above it within the turn's share (:mod:`.turnshare`)."""
        used = self.reservations.cache_bytes() + self.reservations.reserved
        return (within_budget(used, cand.size, self._recorded_capacity, self.settings.headroom)
                or self._turn.left(cand.size, self._recorded_capacity))

    def reserve_repair(self, cand: Candidate) -> bool:
        """Start ``cand`` with no reservation if it is the download of a sample waiting for its
        repair in place (True), rather than with room for its size.

        The cache's total already counts the sample's bytes, and its admission renames the
        download over the damaged file and adds nothing to that total (a download of other bytes
        is refused and adds nothing either): reserving its size as a new sample would make it wait
        in backpressure for as long as live epochs pin a full cache, the sampler's steady state,
        while the damaged bytes are served. Its temp file still takes room on the disk until it
        lands, so it goes this way only while the volume's free space holds it beside half the
        margin kept free for the index; otherwise it reserves like any download (and the room it
        waits for is the disk's). The repairs already in flight count against that free space:
        it is measured once a second, and many damaged samples found at once would each see it
        whole."""
        taken = sum(self._unreserved.values())
        if (not self.store.awaits_repair(cand.key)
                or taken + cand.size + self.disk.margin // 2 > self.disk.free()):
            return False
        self._unreserved[cand.key] = cand.size
        return True

    def unreserved(self, cand: Candidate) -> bool:
        """Whether ``cand``'s download landed with no reservation (:meth:`reserve_repair`): its
        admission is :meth:`admit_repair`, not the admitter's. Asked once, when it lands."""
        return self._unreserved.pop(cand.key, None) is not None

    def release(self, cand: Candidate) -> None:
        """Give back what ``cand``'s download reserved (a repair in place reserved nothing), and
        its part of the turn's share: it was not admitted, so it brought nothing above the newest
        epoch (kept spent, the failed downloads of a remote outage would use up the turn, and the next
        try would be refused and shown as a full cache)."""
        if self._unreserved.pop(cand.key, None) is None:
            self.reservations.release(cand.size)
            self._turn.given_back(cand.size)

    def admission_failed(self, cand: Candidate) -> None:
        """``cand``'s download landed but its batch could not be committed (a full disk): the
        admitter gave its reservation back, and its part of the turn's share is free again too
        (kept spent until the next cut, the keys kept for when there is room would be refused)."""
        self._turn.given_back(cand.size)

    def admit_repair(self, cand: Candidate, admission: Admission) -> bool:
        """Admit the download of a repair in place that reserved nothing; False when it was dropped.

        It adds nothing to the cache's total only while its sample still waits for the repair.
        That is checked here, on the loop's thread, which makes every eviction, so none comes
        between the check and the admission. A sample evicted since the download began would come
        back as a new sample, with bytes no reservation made room for: the download is dropped (a
        key the fetch order still wants is fetched again in its turn). A failed admission removes
        the temp file and raises."""
        try:
            if not self.store.awaits_repair(cand.key):
                log.info("dropping the repair download of %r: its sample is no longer in the cache",
                         cand.key)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(admission.temp)
                return False
            self.store.admit([admission])
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(admission.temp)
            raise
        self.reservations.reconcile()  # nothing added; read again rather than assumed
        return True

    def skip_unfittable(self, cand: Candidate) -> Unfit:
        """Skip ``cand`` (counted, logged) when it is bigger than the cache could hold on this
        volume even empty (:attr:`Unfit.SKIPPED`), or hold it back while the volume can hold no
        sample at all (:attr:`Unfit.WAIT`).

        The listing's object limit comes from --capacity, which may be more than the volume
        holds: such an object would wait for room forever, first in line, and no key after it
        would be fetched. One that fits once other samples are evicted still waits (that is
        backpressure). An object over the object limit is skipped too: the catalog keeps objects a
        higher limit listed (a lower ``--capacity`` since lists nothing afresh), and one that can
        never fit beside the live epochs would be tried first for ever. A skip the full volume
        refused to record is a wait too: skipped in memory only, the key came back at the next
        pass, and every key of the catalog with it, many times a second."""
        limit = self.settings.object_limit
        if cand.size > limit:
            self._skip_lines[0].warn(lambda: (
                f"skipping {cand.key!r}: {cand.size} bytes is over the object limit {limit} "
                f"(--capacity {self.settings.capacity})"))
            return self._skipped(cand)
        largest = self.disk.largest()
        if cand.size <= largest:
            self._holds_nothing(None)
            return Unfit.FITS
        if self._holds_nothing(largest):
            return Unfit.WAIT
        self._skip_lines[1].warn(lambda: (
            f"skipping {cand.key!r}: {cand.size} bytes is more than the cache can ever hold on its "
            f"filesystem ({largest} bytes: --capacity {self.disk.capacity}, filesystem "
            f"{self.disk.fs_bytes}, {self.disk.margin} kept free)"))
        return self._skipped(cand)

    def _skipped(self, cand: Candidate) -> Unfit:
        if self._written(lambda: self.store.mark_skipped(cand.key)):
            return Unfit.SKIPPED
        self.set_backpressure(DISK_FULL)  # measured again at once (the loop's write said so)
        return Unfit.WAIT

    def _holds_nothing(self, largest: int | None) -> bool:
        """Whether the volume can hold no sample of the catalog, not even alone in an empty cache:
        ``largest`` (:meth:`DiskSpace.largest`) is 0, or the cache holds no bytes and ``largest``
        is below every key not yet cached or skipped (None: a key fits). A cache that holds
        samples can hold samples: a key too large for it is skipped, never a pause for good.
        Otherwise sampling pauses with a reason that says so, and resumes once the volume grows,
        instead of skipping every key as if the objects were at fault: a cache on
        a 400 KiB tmpfs went through its catalog 200 times in 4 s, 60,000 lines of log, as each
        skip's write was refused and each key came back. The catalog is read (the first key that
        fits ends it) once per value of ``largest`` (moved when the volume is resized) and of
        the catalog's last row (moved when a listing adds keys). The budget recorded meanwhile
        (status's ``capacity_bytes``, ``epochfs_cache_capacity_bytes``) is what the volume allows,
        ``largest`` (at least 1 byte), as for any volume short of room; the budget the disk allows
        once it has grown is recorded when the pause ends."""
        if largest is not None and largest > 0:
            if self.reservations.cache_bytes() > 0:
                largest = None  # it holds samples: a key larger than it can hold is the key's fault
            else:
                seen = (largest, self.store.last_catalog_row())  # a relist's new keys: looked at
                if self._fit_known is None or self._fit_known[0] != seen:
                    self._fit_known = (seen, self._any_fits(largest))
                if self._fit_known[1]:
                    largest = None
        if largest is None:
            if self.backpressure is not None and self.backpressure.startswith(_HOLDS_NOTHING):
                self.set_backpressure(None)
                self._record_capacity(self.disk.effective_capacity(self.reservations.cache_bytes()))
            return False
        self._record_capacity(largest)  # what the volume allows, not --capacity, while it lasts
        self.set_backpressure(
            f"{_HOLDS_NOTHING} ({format_size(largest)} of --capacity {format_size(self.disk.capacity)}: "
            f"a {format_size(self.disk.fs_bytes)} filesystem, {format_size(self.disk.margin)} kept "
            "free for the index); sampling resumes once it is larger")
        return True

    def _any_fits(self, largest: int) -> bool:
        """Whether a key not cached nor skipped is at most ``largest`` bytes (reads the catalog
        until one is found)."""
        after: int | None = None
        while page := self.store.candidates(after_rank=after, limit=4096):
            if any(c.size <= largest for _, c in page):
                return True
            after = page[-1][0]
        return False

    def full(self, *, waiting_on_own: bool, target: int | None = None) -> None:
        """No room for the next download: backpressure, unless downloads of this loop are in flight
        or being admitted (they will land, which is not the cache being full). ``target``: schedule
        mode's epoch whose window the download was for (None: a look-ahead, or snapshot mode)."""
        if waiting_on_own:
            return
        if self.disk.limited:
            self.set_backpressure(DISK_FULL)
            return
        stuck = None if target is None else self._stuck.reason(target)
        self.set_backpressure(stuck or CACHE_FULL)

    def cut_refused(self, error: BaseException) -> None:
        """The interval's cut met a full volume (``error``): measured at once (:meth:`_measure_pause`)."""
        self.disk.filled(error)
        self._measure_pause()

    def look_at_volume(self) -> None:
        """The loop's tick, while paused for another reason than the disk: :meth:`_measure_pause`
        (statvfs at most once a second). The cuts of a trainer's lookup (the FUSE server's) and of
        queued requests never reach :meth:`cut_refused`, and a "cache full" pause measures nothing."""
        if self.backpressure is not None and not self.backpressure.startswith(DISK_FULL):
            self._measure_pause()

    def _measure_pause(self) -> None:
        """Measure the volume; while it bounds the cache below --capacity a pause under way is
        "disk full" (gauge, status, an Event), not "cache full" (whose reservations are refused
        against the recorded budget before the volume is looked at). Once room returns, the next
        refused reservation measures it (:meth:`reserve` does while the disk bounds the cache),
        :meth:`full` says "cache full" again and the next cut is made."""
        self._record_capacity(self.disk.effective_capacity(self.reservations.cache_bytes()))
        if (self.disk.limited and self.backpressure is not None
                and not self.backpressure.startswith(DISK_FULL)):
            self.set_backpressure(DISK_FULL)

    def _record_capacity(self, capacity: int) -> None:
        """Tell the store when the disk bounds the cache below --capacity (or stops doing so), so
        that epochs are cut to the budget that really exists and status shows it.

        Not in schedule mode: its windows are trimmed to the epoch budget that --capacity gives,
        the same on every node; one recorded lower here would trim this node's windows otherwise
        and cut other epochs than the rest (and the window the fetch order fills would not be
        the one the cut waits for). A volume that could never hold --capacity is refused
        at the start (:meth:`DiskSpace.check_schedule_fits`); one that is short of room for a
        while (another tenant's files) pauses sampling as "disk full" until the room is back."""
        if self.settings.schedule is not None:
            if self.disk.limited and not self._schedule_warned:
                self._schedule_warned = True
                log.warning("--schedule keeps the epoch budget of --capacity (%s) so that every node "
                            "cuts the same windows: the next window waits for the volume to free "
                            "room (now %s)", format_size(self.settings.capacity), format_size(capacity))
            elif not self.disk.limited:
                self._schedule_warned = False
            return
        if abs(capacity - self._recorded_capacity) <= self._recorded_capacity // 100:
            return
        policy = dataclasses.replace(self.settings.policy(), capacity=max(1, capacity))
        if self._written(lambda: self.store.configure(policy)):
            self._recorded_capacity = capacity

    def _written(self, fn: Callable[[], Any]) -> bool:
        """Run the store write ``fn`` through the loop's write; False when the volume refused it
        (the loop's write swallows that, and the caller tries again at its next call)."""
        return bool(self._write(lambda: (fn(), True)[1]))

    def _take_over(self) -> None:
        """Clear the backpressure a sampler killed while paused left in the index (a clean stop
        clears its own; an older index's "1" is "cache full"). This sampler owns the flag while it
        holds the cache's lock, and has not paused yet: as the reason is written only when it
        changes, the dead run's "cache full" or "disk full" would stay in status and in
        ``epochfs_backpressure`` for good if this run never pauses, as after a --capacity raised
        to end backpressure. A full volume that refuses the write leaves it to the next
        :meth:`set_backpressure`."""
        raw = self.store.meta(Meta.BACKPRESSURE) or "0"
        left = {"0": None, "1": CACHE_FULL}.get(raw, raw)
        self._recorded_backpressure = left
        if left is not None:
            log.info("clearing the backpressure the last run left in the index (%s): this run "
                     "records its own if it pauses", left)
            self.set_backpressure(None)

    def set_backpressure(self, reason: str | None) -> None:
        """Sampling waits for ``reason`` (None: it goes on). The loop and the gauges know at once;
        the index is written until it took the reason: a volume filled to its last byte refuses
        the write, and the first write after room came back must still say "disk full" (it was
        recorded only when the reason changed, and so never, while the volume stayed full)."""
        changed = reason != self.backpressure
        if changed:
            self.backpressure = reason
            pause_gauges().show(reason)  # (made at the first pause: see PauseGauges)
        if reason != self._recorded_backpressure and self._written(
                lambda: self.store.set_backpressure(reason)):
            self._recorded_backpressure = reason
        self._paused.update(reason is not None, material=changed, start=self._pause_line,
                            still=lambda: f"backpressure still on: {self.backpressure}",
                            end=lambda: "backpressure cleared")

    def _pause_line(self) -> str:
        """The line a pause starts with (a budget that turns over pauses and resumes at each cut:
        :attr:`_paused` says so at most once a minute, not per turn)."""
        if self.backpressure != CACHE_FULL:
            return f"backpressure: {self.backpressure}; waiting for room"
        stats = self.store.stats()
        return (f"backpressure: cache full ({format_size(stats.cache_bytes)} of "
                f"{format_size(stats.capacity_bytes)}) and nothing evictable; waiting for a cut or "
                "an epoch to retire")


__all__ = ["DiskFull", "Room", "Unfit"]
