"""Reads of the admission order for a reader that follows the cache as it grows: the folder view's
next epoch, built ahead (:mod:`epochfs.sidecar.folderview_ahead`).

Why a module of its own: a snapshot-mode epoch is a range of the admission order (``first_sample
<= id <= max_sample``, :mod:`.epochs`), so whoever wants the *next* cut's set before it is cut
follows the samples as they are admitted (ids only grow) and the front of the range as it moves
(the epoch budget, eviction). These reads say exactly that and nothing more: the samples admitted
after an id, the lowest and highest ids held, and a live epoch's range as its row records it. They
change nothing, and a reader outside the store needs no SQL of its own, nor the store's
private index handle.

A schedule-mode epoch is a window of the sampling order instead (:mod:`.windows`): the samples
whose ``(rank, key)`` lies between its two ends, with ids up to its ``max_sample``. Its next window
is as predictable (a pure function of seed, catalog and N), so :class:`WindowReads` says the same
things for it: where epoch N's window lies now, a cut window's ends, count and bytes as its row
records them, and the samples held between two places of the order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from epochfs.sidecar.store.index import Index
from epochfs.sidecar.store.records import Policy
from epochfs.sidecar.store.windows import at, window

Place = tuple[int, str]
"""A place in the sampling order: (rank, key), compared as SQLite compares them (UTF-8 bytes)."""


@dataclass(frozen=True)
class AdmittedSample:
    """One sample as an epoch's manifest and tree show it."""

    id: int
    """Its place in the admission order (ids only grow, never reused)."""
    path: str
    size: int
    checksum: str
    sid: str
    """Its sample id: the object file's name (:func:`.objects.object_name`)."""
    rank: int | None = None
    """Its key's catalog rank when admitted (None: unknown, in no window)."""
    key: str = ""


@dataclass(frozen=True)
class EpochExtent:
    """A live snapshot-mode epoch as its row records it: every held sample with ``first <= id <=
    last``, ``samples`` of them, ``bytes`` in all."""

    first: int
    last: int
    samples: int
    bytes: int


def samples_after(ix: Index, after_id: int, limit: int) -> list[AdmittedSample]:
    """Up to ``limit`` samples with ids above ``after_id``, in admission order."""
    rows = ix.query("SELECT id, path, size, checksum, sid, rank, key FROM samples WHERE id > ? "
                    "ORDER BY id LIMIT ?", (after_id, limit))
    return [_sample(r) for r in rows]


def _sample(r: Any) -> AdmittedSample:
    i, p, s, c, sid, rank, key = r
    return AdmittedSample(int(i), str(p), int(s), str(c), str(sid), None if rank is None else int(rank),
                          str(key))


def id_bounds(ix: Index) -> tuple[int, int]:
    """The lowest and highest sample ids held ((0, 0) when none is)."""
    # Two subqueries: SQLite answers a lone MIN or MAX from the index's ends, both in one SELECT by
    # a scan of the table (asked every step of the folder view, 0.1 s apart).
    lo, hi = ix.query("SELECT COALESCE((SELECT MIN(id) FROM samples), 0), "
                      "COALESCE((SELECT MAX(id) FROM samples), 0)")[0]
    return int(lo), int(hi)


def arrived_since_newest(ix: Index) -> bool:
    """Whether a sample was admitted after the newest epoch was cut (True with no epoch): what a
    timer cut waits for, also across a restart of the sampler that counted the arrivals."""
    row = ix.query("SELECT (SELECT max_sample FROM epochs ORDER BY n DESC LIMIT 1), "
                   "(SELECT MAX(id) FROM samples)")[0]
    return row[0] is None or (row[1] is not None and int(row[1]) > int(row[0]))


def epoch_extent(ix: Index, n: int) -> EpochExtent | None:
    """Epoch ``n``'s range, count and bytes; None unless it is live and a range of the admission
    order (schedule-mode windows and epochs listed row by row are not)."""
    rows = ix.query("SELECT first_sample, max_sample, samples, bytes, retired FROM epochs WHERE n=?", (n,))
    if not rows or rows[0][0] is None or int(rows[0][4]):
        return None
    first, last, samples, nbytes, _ = rows[0]
    return EpochExtent(int(first), int(last), int(samples), int(nbytes))


@dataclass(frozen=True)
class WindowExtent:
    """A live schedule-mode epoch recorded by its window's ends: every held sample with ``lo <=
    (rank, key) <= hi`` and ``id <= last``, less ``excluded`` of them (keys a relist dropped),
    ``samples`` of them, ``bytes`` in all."""

    lo: Place
    hi: Place
    last: int
    samples: int
    bytes: int
    excluded: int


class WindowReads:
    """The reads that follow schedule mode's next window (:meth:`Store.admitted_windows`)."""

    def __init__(self, ix: Callable[[], Index], policy: Callable[[], Policy]) -> None:
        self._ix = ix
        self._policy = policy

    def extent(self, n: int) -> WindowExtent | None:
        """Live epoch ``n``'s window as its row records it; None unless it is live and recorded
        by its ends (a snapshot range, or a window listed row by row)."""
        rows = self._ix().query(
            "SELECT lo_rank, lo_key, hi_rank, hi_key, max_sample, samples, bytes, retired, "
            "(SELECT COUNT(*) FROM epoch_excluded WHERE epoch = ?) FROM epochs WHERE n = ?", (n, n))
        if not rows or rows[0][1] is None or int(rows[0][7]):
            return None
        lo_rank, lo_key, hi_rank, hi_key, last, samples, nbytes, _, excluded = rows[0]
        return WindowExtent((int(lo_rank), str(lo_key)), (int(hi_rank), str(hi_key)), int(last),
                            int(samples), int(nbytes), int(excluded))

    def predicted(self, n: int) -> tuple[Place, Place] | None:
        """Where epoch ``n``'s window lies if it were cut now (its first and last catalog row);
        None when it is empty or the store is not in schedule mode. Finds the window as the cut
        does (the store's own :func:`.windows.window`), once per epoch, not per step, then each
        end on the rank index alone (:func:`.windows.at`): a walk of ``ORDER BY rank, key`` to
        the end read a catalog row per position before it (3.8-8.3 s at 1M keys, after every
        publish), ``at`` reads only the few rows of the end's rank."""
        policy = self._policy()
        if policy.schedule is None:
            return None
        ix = self._ix()
        with ix.read() as db:
            lo, hi = window(db, policy, n)
            if lo >= hi:
                return None
            return at(db, lo), at(db, hi - 1)

    def between(self, lo: Place, hi: Place, *, lo_open: bool = False, hi_open: bool = False,
                max_id: int, limit: int) -> list[AdmittedSample]:
        """Up to ``limit`` held samples from ``lo`` to ``hi`` in the sampling order (ends included
        unless open) with ids up to ``max_id``, in that order (a range of the rank index)."""
        above, below = (">" if lo_open else ">="), ("<" if hi_open else "<=")
        rows = self._ix().query(
            "SELECT id, path, size, checksum, sid, rank, key FROM samples WHERE rank IS NOT NULL "
            f"AND (rank, key) {above} (?, ?) AND (rank, key) {below} (?, ?) AND id <= ? "
            "ORDER BY rank, key LIMIT ?", (*lo, *hi, max_id, limit))
        return [_sample(r) for r in rows]
