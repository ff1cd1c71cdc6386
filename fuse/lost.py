"""Samples the remote lost, as the FUSE view shows them: listed still, EIO when read.

A sample whose object file was damaged or deleted is taken out and fetched again into its place;
one that cannot be (its key no longer listed, or other bytes under it) is marked lost in the
store (``repairs.lost``). Its row stays, so every live epoch keeps listing it and its manifest
line: an epoch never shrinks under a reader. What the view shows for its entry:

* ``stat`` gives a regular file of the sample's size, not a symlink to an object file that is not
  there (that would answer ENOENT, which a reader takes for "no such file", and which the torch
  client retries for its whole window as if the mount were restarting);
* an open (``open`` of the entry, or ``readlink`` of one the kernel still holds as a symlink)
  answers **EIO**, counted in ``epochfs_fuse_lost_reads_total{op}`` and logged (rate-limited:
  :class:`LostLog`), naming the entry's path inside its epoch.

The view asks the store whether the set changed at each refresh (twice a second; a scan of the
few rows of ``repairs``); the refresher tells the kernel to drop what it cached of a newly lost
entry (its symlink target), so the next open reaches the server.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from epochfs.fuse.metrics import fuse_metrics
from epochfs.fuse.treebuild import ENC
from epochfs.sidecar.store import EpochReader

log = logging.getLogger("epochfs.fuse")

MAX_INVALIDATIONS = 10_000
"""Newly lost entries the refresher invalidates one by one in a tick (per live epoch); beyond it
the kernel's cached symlinks of the rest answer ENOENT until their timeout (logged)."""


class LostSample(Exception):
    """``epoch-<epoch>/<rel>`` is the entry of a sample the remote lost: a read answers EIO."""

    def __init__(self, epoch: int, rel: str) -> None:
        super().__init__(f"epoch-{epoch}/{rel}")
        self.epoch = epoch
        self.rel = rel


class LostEntries:
    """The lost samples as the view shows them: object name (bytes, as the trees hold them) ->
    size, re-read from the store only when its digest changes. Thread-safe: the refresher and
    request threads (a cut on lookup) both refresh."""

    def __init__(self) -> None:
        self.sizes: dict[bytes, int] = {}
        """Replaced, never changed in place: trees hold a reference to one version."""
        self._keys: frozenset[str] = frozenset()
        self._digest: tuple[int, int, int, int] | None = None
        self._new: list[str] = []
        self._lock = threading.Lock()

    def refresh(self, store: EpochReader) -> bool:
        """Re-read the set if it changed; True when it did."""
        with self._lock:
            digest, entries = store.lost_samples(unless=self._digest)
            if entries is None:
                return False
            keys = frozenset(e.path for e in entries)
            self._new.extend(sorted(keys - self._keys))
            self.sizes = {e.object_name.encode(*ENC): e.size for e in entries}
            self._keys = keys
            self._digest = digest
        return True

    def take_new(self) -> list[str]:
        """The keys (paths inside an epoch) lost since the last call: the refresher invalidates
        their entries in every live epoch."""
        with self._lock:
            new, self._new = self._new, []
        return new


class LostLog:
    """One WARNING line per read of a lost entry, at most ``burst`` per ``interval`` seconds; the
    reads past that are counted and summed up in one line when the next interval starts. A trainer
    that opens a lost file every step must not fill the log (the metric counts every read)."""

    def __init__(self, *, burst: int = 10, interval: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.burst = burst
        self.interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._start = -float("inf")
        self._logged = 0
        self._quiet = 0

    def report(self, lost: LostSample, op: str) -> None:
        """Count ``lost`` in the metric and log it (rate-limited)."""
        fuse_metrics().lost_read(op)
        now = self._clock()
        with self._lock:
            quiet = 0
            if now - self._start >= self.interval:
                quiet, self._quiet = self._quiet, 0
                self._start, self._logged = now, 0
            speak = self._logged < self.burst
            if speak:
                self._logged += 1
            else:
                self._quiet += 1
        if quiet:
            log.warning("%d more read(s) of samples lost from the remote were answered EIO in the "
                        "last %.0fs (not logged one by one)", quiet, self.interval)
        if speak:
            log.warning("epoch-%d/%s: its sample was lost from the remote (it cannot be fetched "
                        "again): answered EIO; the entry stays listed until the epoch retires",
                        lost.epoch, lost.rel)


lost_log = LostLog()
"""The server's one rate limiter (every request thread reports to it)."""
