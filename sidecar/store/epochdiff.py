"""What an epoch adds to and leaves out of the one before: the epochs table's ``new`` and ``left
out`` (docs/metrics.md: the samples not in the epoch before, and the epoch before's samples not in
this one), counted once at the cut; and whether the next schedule-mode window would add anything
to the newest epoch (the sampler's ``--cut-interval`` timer asks before it cuts).

Apart from :mod:`.epochs` because each is a set difference of two epochs whose forms differ: a
range of the admission order (snapshot mode), a window's bounds (schedule mode) or rows listed one
by one (older schemas). Where both are ranges the difference is arithmetic on their ends and
counted on the rowid, in the common case (the new epoch starts at or above the previous one's
first sample) by one range read of the ids above the previous epoch, never the epoch; an epoch
starting below the previous one (a budget that grew) also counts the ids below that one. Any other
pair is intersected by one query (:func:`common`); only a mode switch or a window pays it.
"""

from __future__ import annotations

import sqlite3

from epochfs.sidecar.store.windows import Span, members


def membership(db: sqlite3.Connection, n: int) -> tuple[str, tuple[object, ...]] | None:
    """SQL on sample ``s`` that holds for the members of live epoch n, and its arguments (None:
    retired, its members may be evicted). Plain values, so that SQLite ranges an index on them."""
    row = db.execute("SELECT retired, first_sample, max_sample, lo_rank, lo_key, hi_rank, hi_key "
                     "FROM epochs WHERE n=?", (n,)).fetchone()
    if row is None or row[0]:
        return None
    _, first, top, lo_rank, lo_key, hi_rank, hi_key = row
    if first is not None:
        return "s.id BETWEEN ? AND ?", (first, top)
    if lo_key is not None:
        return ("s.rank IS NOT NULL AND (s.rank, s.key) >= (?, ?) AND (s.rank, s.key) <= (?, ?) "
                "AND s.id <= ? AND NOT EXISTS (SELECT 1 FROM epoch_excluded x "
                "WHERE x.epoch = ? AND x.sample = s.id)", (lo_rank, lo_key, hi_rank, hi_key, top, n))
    return "s.id IN (SELECT sample FROM epoch_samples WHERE epoch = ?)", (n,)


def common(db: sqlite3.Connection, prev: int, n: int) -> int | None:
    """The samples of both epoch ``prev`` and epoch ``n`` (None: one of them retired).

    A window takes samples admitted before the last cut (fetched ahead of it) and loses its front
    to the budget's trim, so neither "ids above the last cut" nor "the last epoch plus those, less
    this one" is its new or left-out count (0 left out was shown where 3 were). Counted once, at
    the cut, by one range read of an index: the exact set difference both ways."""
    a, b = membership(db, prev), membership(db, n)
    if a is None or b is None:
        return None
    return int(db.execute(f"SELECT COUNT(*) FROM samples s WHERE {a[0]} AND {b[0]}",
                          a[1] + b[1]).fetchone()[0])


def _count_ids(db: sqlite3.Connection, lo: int, hi: int) -> int:
    """Samples with ``lo <= id <= hi`` (a range of the rowid: both bounds on the one column)."""
    if lo > hi:
        return 0
    return int(db.execute("SELECT COUNT(*) FROM samples WHERE id BETWEEN ? AND ?", (lo, hi)).fetchone()[0])


def _ranges_new(db: sqlite3.Connection, first: int, top: int, prev_first: int, prev_top: int) -> int:
    """The samples of range [first, top] outside range [prev_first, prev_top]: ids only grow and a
    sample evicted is gone, so the held ids in those parts are exactly the new members. Where the
    new range starts at or above the previous one's start (the common case) that is the ids above
    the previous range, one read of them; below it, the ids below the previous range too."""
    if prev_first > prev_top:
        return _count_ids(db, first, top)  # the previous epoch was empty
    below = _count_ids(db, first, min(prev_first - 1, top)) if first < prev_first else 0
    return below + _count_ids(db, max(first, prev_top + 1), top)


def new_and_left_out(db: sqlite3.Connection, n: int, samples: int, span: Span | None) -> tuple[int, int]:
    """(new, left out) of epoch n, just inserted with ``samples`` members, against the epoch below
    it (all new for the first epoch). ``span``: its window as the cut read it (its ``newer``
    carries a count made ahead)."""
    prev = db.execute("SELECT MAX(n) FROM epochs WHERE n < ?", (n,)).fetchone()[0]
    if prev is None:
        return samples, 0
    prev_samples, prev_top, prev_first = db.execute(
        "SELECT samples, max_sample, first_sample FROM epochs WHERE n=?", (prev,)).fetchone()
    first, top, lo_key = db.execute("SELECT first_sample, max_sample, lo_key FROM epochs WHERE n=?",
                                    (n,)).fetchone()
    prev_samples, prev_top = int(prev_samples), int(prev_top)
    if first is not None and prev_first is not None:
        # Both ranges: exact even where the previous one retired (its evicted samples are in
        # neither the held ids nor this epoch, and so left out).
        new = _ranges_new(db, int(first), int(top), int(prev_first), prev_top)
        return new, max(0, prev_samples - (samples - new))
    both = common(db, int(prev), n)
    if both is not None:
        return samples - both, max(0, prev_samples - both)
    # The previous epoch retired (its members may be gone): the samples since its cut are new.
    if first is not None:
        new = _count_ids(db, max(int(first), prev_top + 1), int(top))
    elif lo_key is not None:
        known = span.newer if span is not None else None
        # Counted ahead (:mod:`.ahead`) when measured above this same previous epoch.
        new = known[1] if known is not None and known[0] == prev_top else members(db, n, above=prev_top)[0]
    else:
        new = int(db.execute("SELECT COUNT(*) FROM epoch_samples WHERE epoch=? AND sample > ?",
                             (n, prev_top)).fetchone()[0])
    return new, max(0, prev_samples + new - samples)


_IN_NEXT = ("s.rank IS NOT NULL AND (s.rank, s.key) >= (?, ?) AND (s.rank, s.key) <= (?, ?) "
            "AND EXISTS (SELECT 1 FROM catalog c WHERE c.key = s.key AND c.rank = s.rank)")
"""SQL: sample ``s`` would be a member of the next window with these ends (its key in the catalog
at the rank it recorded: a key a relist dropped is not); arguments (lo_rank, lo_key, hi_rank, hi_key)."""

_IN_NEXT_BY_ID = _IN_NEXT.replace("(s.rank, s.key) ", "(+s.rank, s.key) ")
""":data:`_IN_NEXT` for a read that ranges the ids (``+s.rank``: not the rank index, whose range
over the whole window SQLite otherwise walks to find the few samples admitted since a cut)."""


def _any(db: sqlite3.Connection, where: str, args: tuple[object, ...]) -> bool:
    return db.execute(f"SELECT 1 FROM samples s WHERE {where} LIMIT 1", args).fetchone() is not None


def window_adds(db: sqlite3.Connection, span: Span, newest: int) -> bool:
    """Whether a window with ``span``'s ends, cut now, would hold a sample epoch ``newest`` does
    not. Stops at the first such sample: against a window recorded by its bounds, two reads of
    the rank index outside the newest window's ends and one of the ids above its cut, each empty
    or ended at once when the windows are the same; against a snapshot range (a mode switch), the
    ids outside it."""
    if span.ends is None:
        return False
    row = db.execute("SELECT retired, first_sample, max_sample, lo_rank, lo_key, hi_rank, hi_key "
                     "FROM epochs WHERE n=?", (newest,)).fetchone()
    if row is None or row[0]:
        return True  # nothing live to compare with: the cut decides
    _, first, top, lo_rank, lo_key, hi_rank, hi_key = row
    ends = tuple(span.ends)
    if first is not None:
        # A range of ids (schedule mode over a snapshot epoch): the samples above it, then those
        # below it (the cache's oldest, about --headroom of it), by id.
        return _any(db, f"s.id > ? AND {_IN_NEXT_BY_ID}", (top, *ends)) or _any(
            db, f"s.id < ? AND {_IN_NEXT_BY_ID}", (first, *ends))
    if lo_key is None:
        # Rows listed one by one (an older schema's epoch): the next window's samples not listed.
        inside = membership(db, newest)
        assert inside is not None
        return _any(db, f"{_IN_NEXT} AND NOT ({inside[0]})", (*ends, *inside[1]))
    if _any(db, f"{_IN_NEXT} AND (s.rank, s.key) < (?, ?)", (*ends, lo_rank, lo_key)):
        return True
    if _any(db, f"{_IN_NEXT} AND (s.rank, s.key) > (?, ?)", (*ends, hi_rank, hi_key)):
        return True
    # Between the newest window's ends: samples admitted after its cut, or that it left out
    # (a key a relist dropped then and listed again since).
    return _any(db, f"s.id > ? AND {_IN_NEXT_BY_ID}", (top, *ends)) or _any(
        db, f"{_IN_NEXT} AND s.id IN (SELECT sample FROM epoch_excluded WHERE epoch = ?)", (*ends, newest))
