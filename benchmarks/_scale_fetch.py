"""Fetching while the listing runs, against fetching after it: two windows of ``benchmarks/scale.py``.

The listers run in the sampler's process (docs/listing.md): they parse pages and commit them to the
index the sampler's fetch loop and admitter use too. How much that costs the fetches is the ratio of
two rates measured in the same run, on the same cache, from the same sidecar process:

- **while listing**: from epoch 0 for ``window`` seconds, or until the listing is complete;
- **after listing**: once the restarted sidecar (its restart measured first, as before) has
  completed the listing, a third start of the sidecar with ``ROOM`` more capacity than the
  restart's (samples admitted after the benchmark's cuts cannot be evicted before the next cut, so
  the second start stops fetching once its cache is full): ``window`` seconds from its first new
  sample.

Each window reads, at its two ends, the highest admission id in the index (one per sample
admitted; eviction does not lower it), the catalog's key count (``catalog_objects``, raised by every
committed page) and the CPU seconds of the sampler process and of the synthetic S3 endpoint (which
shares this machine's cores, as S3 does not: its share says how much of a slow window is the
endpoint's).
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from epochfs.benchmarks import harness
from epochfs.sidecar.store.epochpins import RETIRE_GRACE
from epochfs.sidecar.store.eviction import gaps

POLL = 0.25
"""Seconds between looks at the index while a window runs."""
ROOM = 1 << 30
"""Bytes of capacity added for the window after the listing (65k samples of 16 KiB)."""
RESTART_ROOM = 256
"""Samples' worth of capacity the restart gets above the first start's: the first start goes on
fetching while the benchmark measures, and samples admitted after its last cut are never evicted
(``sidecar/store/eviction.py``), so a fast first start can fill its cache to the last byte; the
same capacity again would then fetch nothing, and "the next sample after the restart" never come."""


@dataclass
class Window:
    """One window's rates (nan when it could not be measured)."""

    seconds: float = float("nan")
    samples_per_s: float = float("nan")
    keys_per_s: float = float("nan")
    """Keys the catalog gained per second (0 once the listing is complete)."""
    sampler_cpu: float = float("nan")
    """CPU of the sampler process, in cores (1.0: one core busy the whole window)."""
    endpoint_cpu: float = float("nan")


@dataclass
class Progress:
    samples: int
    keys: int
    complete: bool


def progress(index: Path) -> Progress:
    """Admissions, catalog keys and the listing's state, from a read-only connection (no lock)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{index}?mode=ro", uri=True, timeout=5)) as db:
            newest = db.execute("SELECT max(id) FROM samples").fetchone()[0]
            meta = dict(db.execute("SELECT name, value FROM meta WHERE name IN "
                                   "('catalog_objects', 'listing_complete')").fetchall())
    except sqlite3.Error:
        return Progress(0, 0, False)
    return Progress(int(newest or 0), int(meta.get("catalog_objects") or 0),
                    meta.get("listing_complete") is not None)


def _cpu(pid: int | None) -> float:
    try:
        return harness.cpu_seconds(pid, children=False)
    except OSError:
        return float("nan")


def measure(index: Path, window: float, *, sampler: int | None, endpoint: int | None,
            while_listing: bool) -> Window:
    """Rates over ``window`` seconds from now. ``while_listing``: the window ends early when the
    listing completes (and is nan if it was complete already); otherwise the listing's state is
    not looked at."""
    start = progress(index)
    if while_listing and start.complete:
        return Window()
    began = time.perf_counter()
    cpu0 = (_cpu(sampler), _cpu(endpoint))
    end = start
    while time.perf_counter() - began < window:
        time.sleep(POLL)
        end = progress(index)
        if while_listing and end.complete:
            break
    seconds = time.perf_counter() - began
    cpu1 = (_cpu(sampler), _cpu(endpoint))
    return Window(seconds=seconds, samples_per_s=(end.samples - start.samples) / seconds,
                  keys_per_s=(end.keys - start.keys) / seconds,
                  sampler_cpu=(cpu1[0] - cpu0[0]) / seconds, endpoint_cpu=(cpu1[1] - cpu0[1]) / seconds)


def listing_complete(index: Path) -> bool:
    return progress(index).complete


def nothing_to_fetch(index: Path, *, keys: int, capacity: int, size: int) -> str | None:
    """Why a sidecar started on this stopped cache with ``capacity`` bytes would fetch nothing
    (None: it has keys left and room for one): every one of the remote's ``keys`` cached, or the
    cache too full for one more ``size`` byte sample with nothing eviction may take (samples
    inside a live epoch's range, or admitted after the newest cut). The benchmark asks before it
    times the restart, which otherwise waits its whole ``--timeout`` for a sample that never
    comes."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{index}?mode=ro", uri=True, timeout=5)) as db:
            cached, used = db.execute("SELECT count(*), COALESCE(sum(size), 0) FROM samples").fetchone()
            if int(cached) >= keys:
                return (f"all {keys} keys of the remote are cached ({format_mib(int(used))}): "
                        f"the capacity holds the whole remote")
            if int(used) + size <= capacity:
                return None
            free = any(db.execute(
                "SELECT 1 FROM samples s WHERE s.id BETWEEN ? AND ? AND NOT EXISTS "
                "(SELECT 1 FROM epoch_samples e WHERE e.sample = s.id) LIMIT 1", gap).fetchone()
                for gap in gaps(db, time.time(), _grace(db)))
    except sqlite3.Error as e:
        return f"its index could not be read: {e}"
    return None if free else (
        f"the cache is full ({format_mib(int(used))} of {format_mib(capacity)}) and no sample may be "
        f"evicted (every one is in a live epoch or waits for the next cut)")


def _grace(db: sqlite3.Connection) -> float:
    """The retire grace the sampler recorded (``--retire-grace``), else the default."""
    row = db.execute("SELECT value FROM meta WHERE name='retire_grace'").fetchone()
    return float(row[0]) if row is not None and row[0] else RETIRE_GRACE


def format_mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


__all__ = ["RESTART_ROOM", "Window", "listing_complete", "measure", "nothing_to_fetch", "progress"]
