"""Fetching while the listing runs, against fetching after it: two windows of ``benchmarks/scale.py``.

The listers run in the sampler's process (docs/listing.md): they parse pages and commit them to the
index the sampler's fetch loop and admitter use too. How much that costs the fetches is the ratio of
two rates measured in the same run, on the same cache, from the same sidecar process:

- **while listing**: from epoch 0 for ``window`` seconds, or until the listing is complete;
- **after listing**: once the restarted sidecar (its restart measured first, as before) has
  completed the listing, a third start of the sidecar with ``ROOM`` more capacity (samples
  admitted after the benchmark's cuts cannot be evicted before the next cut, so the second start
  stops fetching once its cache is full): ``window`` seconds from its first new sample.

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

POLL = 0.25
"""Seconds between looks at the index while a window runs."""
ROOM = 1 << 30
"""Bytes of capacity added for the window after the listing (65k samples of 16 KiB)."""


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


__all__ = ["Window", "listing_complete", "measure", "progress"]
