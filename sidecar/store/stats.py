"""Occupancy, counters and live epochs in one consistent read: ``status.json``, ``epochfs status``,
the metrics collector and the Kubernetes status annotation all show this one document.

Nothing here scans a table that grows with the cache: samples and bytes are the running totals
(``cache_samples``, ``cache_bytes``) that admission, eviction and the scrub keep in the same
transactions as their rows (recovery recounts them at the sampler's start), and the epochs, queued
cuts and counters are a few rows each. The FUSE server reads this twice a second."""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

from epochfs.sidecar.store import ahead, hwm
from epochfs.sidecar.store.epochnumbers import next_epoch
from epochfs.sidecar.store.index import Index, Meta
from epochfs.sidecar.store.meta import COUNTER_NAMES
from epochfs.sidecar.store.prefixfix import prefix_fix
from epochfs.sidecar.store.records import Policy, Stats
from epochfs.sidecar.store.snapshot import DISK_FULL as DISK_FULL  # the readers import it from here
from epochfs.sidecar.store.snapshot import budget_at_cut, newest_fitting

CACHE_FULL = "cache full"
"""The sampler's backpressure reason for a full cache with nothing evictable (sampler/room.py
imports it from here: the store is below the sampler)."""

FIRST_ROUND_WAIT = 3.0
"""Seconds from a listing's start that the first epoch waits for a page of every folder."""


def read_stats(ix: Index, policy: Policy) -> Stats:
    with ix.read() as db:
        counters = dict(db.execute("SELECT name, value FROM counters").fetchall())
        samples, nbytes = counters.get("cache_samples", 0), counters.get("cache_bytes", 0)
        inflight, received = (int(ix.get(m) or 0) for m in (Meta.INFLIGHT_BYTES, Meta.INFLIGHT_DOWNLOADED))
        # "1" was written by epochfs before the reason was recorded.
        reason = {"0": "", "1": CACHE_FULL}.get(ix.get(Meta.BACKPRESSURE) or "", ix.get(Meta.BACKPRESSURE))
        catalog = int(ix.get(Meta.CATALOG_OBJECTS) or 0)
        listing = listing_known(db, catalog, excluded=int(counters.get("listing_excluded", 0)),
                                skipped=int(counters.get("listing_skips", 0)))
        listing.pop("weights", None)  # the fetch order's, not status's: folder names, up to 32
        publish_paused = ix.get(Meta.PUBLISH_PAUSED)
        pending = [int(r[0]) for r in db.execute("SELECT n FROM cut_requests ORDER BY n")]
        repairing, lost = (int(v) for v in db.execute(
            "SELECT COUNT(*), COALESCE(SUM(lost), 0) FROM repairs").fetchone())
        epochs = [
            {"epoch": int(a), "samples": int(b), "bytes": int(c), "new": int(d),
             "evicted": int(e), "cut_at": float(f), "listed": g, "estimated": h}
            for a, b, c, d, e, f, g, h in db.execute(
                "SELECT n, samples, bytes, new, evicted, cut_at, listed, estimated FROM epochs "
                "WHERE retired=0 ORDER BY n"
            )
        ]
        first = (None if epochs else
                 _first_cut_doc(ix, db, policy, (int(samples), int(nbytes)), listing, reason))
        later = (_next_epoch(db, policy, (int(samples), int(nbytes)), listing, reason, epochs)
                 if epochs else None)
    return Stats(
        cache_bytes=int(nbytes),
        capacity_bytes=policy.capacity,
        samples=int(samples),
        inflight_bytes=inflight,
        inflight_downloaded_bytes=min(inflight, received),
        backpressure=bool(reason),
        backpressure_reason=reason or None,
        catalog_objects=catalog,
        pending_cuts=pending,
        epochs=epochs,
        latest_epoch=int(epochs[-1]["epoch"]) if epochs else None,
        mode="schedule" if policy.schedule else "snapshot",
        listing=listing,
        first_epoch=first,
        next_epoch=later,
        publish_paused=publish_paused,
        repairing=repairing,
        lost=lost,
        **{k: int(counters.get(k, 0)) for k in COUNTER_NAMES},
    )


def _first_cut_doc(ix: Index, db: sqlite3.Connection, policy: Policy, cache: tuple[int, int],
                   listing: dict[str, Any], backpressure: str | None) -> dict[str, Any]:
    """:func:`_first_epoch`'s document for a cache with no live epoch, with the number that cut
    gets (``epoch``): 0 on a new cache, above the high-water mark once an index reset lost every
    epoch (numbers are never reused). The torch client's ``start_epoch`` starts a new run there,
    as ``/readyz``'s ``first_epoch`` names it."""
    newest = db.execute("SELECT MAX(n) FROM epochs").fetchone()[0]
    n = next_epoch(hwm.floor(hwm.read(ix.path.parent), None if newest is None else int(newest)))
    return {**_first_epoch(db, policy, *cache, listing, backpressure, n), "epoch": n}


def _first_epoch(db: sqlite3.Connection, policy: Policy, samples: int, nbytes: int,
                 listing: dict[str, Any], backpressure: str | None, n: int = 0) -> dict[str, Any]:
    """What the first cut waits for, from figures already read and at most a few rows more (no
    scan: status is read twice a second): the samples its condition needs (``--min-samples``, or
    the first schedule window's keys, whose samples are fetched first) and how many of them epoch 0
    would hold (:func:`epoch_holds`: the cut condition's count, not the cache's, or status showed
    "350/350" for a cut refused at 300); ``cached`` and ``budget`` when the epoch budget is why it
    holds fewer; and a ``warning`` when it can never be met, which ``epochfs status``, ``/readyz``,
    the torch client's wait and the sampler's log (:func:`.epochs.process_cut_requests`) show: a
    trainer would otherwise wait for epoch 0 until its timeout, told only "40/1000". ``n``: the
    epoch named (:func:`_next_epoch`)."""
    least = max(1, policy.min_samples)
    if policy.schedule is not None:
        return _first_window(db, policy, samples, least)
    held, budget = epoch_holds(db, policy, samples, nbytes)
    doc: dict[str, Any] = {"samples": held, "target": least}
    if held < min(samples, least):
        doc.update(cached=samples, budget=budget)
    if awaits_first_round(listing, FIRST_ROUND_WAIT):
        doc["listing_round"] = True
    if _listed_below(listing, least) and samples < least:
        listed = listing["estimated_objects"]
        doc["warning"] = (f"--min-samples {least} is more than the {listed} objects the complete "
                          f"listing holds for this node: epoch {n} is never cut; lower --min-samples")
    elif backpressure == CACHE_FULL and least > 1 and held < least:
        # Full with nothing evictable: no sample comes and none goes until a cut, so the epoch
        # budget's newest samples are all epoch 0 would ever hold.
        doc["warning"] = (
            f"--min-samples {least} is more than the {held} samples an epoch holds: --capacity "
            f"{_size(policy.capacity)} less --headroom {percent(policy.headroom)} leaves "
            f"{_size(policy.epoch_budget)} for an epoch, and the cache is full with nothing "
            f"evictable: epoch {n} is never cut; lower --min-samples or raise --capacity")
    return doc


def _next_epoch(db: sqlite3.Connection, policy: Policy, cache: tuple[int, int], listing: dict[str, Any],
                backpressure: str | None, live: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The next epoch's :func:`_first_epoch` document, with its ``epoch``, when it is never cut (a
    restart with a higher ``--min-samples`` is otherwise waited on in silence); else None. A full cache is
    "never" only while no live epoch is beyond ``--keep-epochs`` (none retires before the cut)."""
    least, n = max(1, policy.min_samples), int(live[-1]["epoch"]) + 1
    if policy.schedule is None and not (least > 1 and (
            (_listed_below(listing, least) and cache[0] < least) or
            (backpressure == CACHE_FULL and len(live) <= policy.keep_epochs))):
        return None  # no warning can follow: the epoch's count is not read (twice a second)
    doc = _first_window(db, policy, cache[0], least) if policy.schedule is not None else \
        _first_epoch(db, policy, *cache, listing, backpressure, n)
    return {**doc, "epoch": n} if doc.get("warning") else None


def _listed_below(listing: dict[str, Any], least: int) -> bool:
    """A complete listing holds fewer keys for this node than ``least``."""
    return bool(listing.get("complete")) and 0 < int(listing.get("estimated_objects") or 0) < least


def epoch_holds(db: sqlite3.Connection, policy: Policy, samples: int, nbytes: int) -> tuple[int, int]:
    """(samples a snapshot epoch cut now would hold, as far as ``--min-samples`` asks, and the bytes
    it may hold): what the cut condition counts (:func:`.epochs.condition_holds`), so that the
    progress shown and the cut agree. Every cached sample while the cache (``samples``, ``nbytes``:
    its running totals) is within the budget; else the newest that fit (:func:`newest_fitting`: at
    most ``--min-samples`` rows; none on a volume that holds nothing more, a budget of 1 byte)."""
    least, budget = max(1, policy.min_samples), policy.epoch_budget
    if nbytes <= budget:
        return samples, budget
    held = newest_fitting(db, budget, least)
    if held < least and (whole := budget_at_cut(db, policy)) > budget:  # asked as the condition asks
        held, budget = (samples if nbytes <= whole else newest_fitting(db, whole, least)), whole
    return held, budget


def _first_window(db: sqlite3.Connection, policy: Policy, samples: int, least: int) -> dict[str, Any]:
    """Schedule mode: the first window's cached keys of those it will hold, once its facts are
    measured ahead (one row, :func:`.ahead.fetch`); before, the cache's samples of the schedule's
    ``initial=``. The window holds its keys within the epoch budget that were not skipped, and no
    more, ever: below ``--min-samples`` it is never cut (``--min-samples`` above ``initial=`` is
    refused at the start)."""
    assert policy.schedule is not None
    row = db.execute("SELECT MIN(n) FROM ahead").fetchone()
    span = None if row[0] is None else ahead.fetch(db, policy, int(row[0]))
    if span is None:
        return {"samples": samples, "target": max(least, policy.schedule.size(0))}
    n, holds = int(row[0]), span.cached + span.missing
    doc: dict[str, Any] = {"samples": span.cached, "target": max(least, holds)}
    if holds < least:
        why = []
        if span.hi < policy.schedule.size(n):
            why.append(f"the complete listing holds {span.hi} keys for this node")
        if span.lo > 0:
            why.append(f"the epoch budget ({_size(policy.epoch_budget)}: --capacity less --headroom) "
                       f"holds {span.hi - span.lo} of its first {span.hi} keys")
        if span.hi - span.lo > holds:
            why.append(f"{span.hi - span.lo - holds} of them were skipped")
        doc["warning"] = (f"--min-samples {least} is more than the {holds} samples epoch {n}'s window "
                          f"holds ({'; '.join(why) or 'its keys'}): it is never cut; lower --min-samples")
    return doc


def percent(share: float) -> str:
    """``share`` as a percentage of up to four digits: 0.25 -> ``25%``, 0.999 -> ``99.9%``
    (``{:.0%}`` said 100% of a ``--headroom`` the flag refuses at 1)."""
    return f"{share * 100:.4g}%"


def _size(n: float) -> str:
    """Binary units as the settings write them (``48.0 KiB``: config's format_size, which the store
    may not import)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _meta(db: sqlite3.Connection, key: Meta) -> str | None:
    row = db.execute("SELECT value FROM meta WHERE name=?", (key.value,)).fetchone()
    return None if row is None else str(row[0])


def listing_known(db: sqlite3.Connection, catalog: int, *, excluded: int | None = None,
                  skipped: int | None = None) -> dict[str, Any]:
    """How much of the dataset the listing has covered, so a user can tell an early epoch (cut
    from the first keys listed) from a representative one: ``complete``; while it runs, keys
    ``listed`` of about ``estimated`` in the remote (every shard's, from the listing's estimates),
    ``covered`` (their ratio), folders (``spans``) reached, and this shard's ``estimated_objects``;
    a complete listing that found nothing for this shard has a ``warning``; ``excluded``: keys of
    this shard the running (or last) listing left out by ``--include``/``--exclude``; ``skipped``:
    keys it skipped (over the object limit, names refused: the ``listing_skips`` counter), which
    the warning names instead of the prefix; ``failing``: why the last listing run failed, while
    it is tried again."""
    running = db.execute("SELECT 1 FROM listing_parts WHERE done=0 LIMIT 1").fetchone() is not None
    # read_stats has every counter already
    excluded = _counter(db, "listing_excluded") if excluded is None else excluded
    skipped = _counter(db, "listing_skips") if skipped is None else skipped
    known = _listing_known(db, catalog, running, _meta(db, Meta.LISTING_COMPLETE) is not None, excluded,
                           skipped)
    if failed := _meta(db, Meta.LISTING_FAILED):
        known["failing"] = failed
    return known


def _counter(db: sqlite3.Connection, name: str) -> int:
    row = db.execute("SELECT value FROM counters WHERE name=?", (name,)).fetchone()
    return int(row[0]) if row is not None else 0


def _listing_known(db: sqlite3.Connection, catalog: int, running: bool, complete: bool,
                   excluded: int, skipped: int) -> dict[str, Any]:
    if not running or complete:
        # A relist runs over a catalog that was complete: the epochs sample the whole dataset
        # as it was listed, not the part the relist has reached (``relisting`` says it runs).
        known: dict[str, Any] = {"complete": complete, "covered": 1.0 if complete else 0.0,
                                 "estimated_objects": catalog if complete else None}
        if running:
            known["relisting"] = True
        if excluded:
            known["excluded"] = excluded
        if complete and catalog == 0:
            known["warning"] = _empty_warning(db, excluded, skipped)
        return known
    try:
        known = json.loads(_meta(db, Meta.LISTING_PROGRESS) or "{}")
    except ValueError:
        known = {}
    try:
        return _running_known(known if isinstance(known, dict) else {}, catalog, excluded)
    except (TypeError, ValueError, OverflowError):  # a record not as the listing writes it
        return _running_known({}, catalog, excluded)


def _running_known(known: dict[str, Any], catalog: int, excluded: int) -> dict[str, Any]:
    """:func:`listing_known` of a running listing, from its progress record ``known``."""
    listed, estimated = int(known.get("listed", 0)), int(known.get("estimated", 0))
    covered = min(1.0, listed / estimated) if estimated > 0 else 0.0
    out = {"complete": False, "covered": round(covered, 4), "listed": listed, "estimated": estimated,
           "spans": int(known.get("spans", 0)), "spans_reached": int(known.get("spans_reached", 0)),
           "first_round": bool(known.get("first_round", False)), "began": float(known.get("began", 0)),
           "skew": float(known.get("skew", 0.0)),
           "fair_cap": int(known["fair_cap"]) if known.get("fair_cap") is not None else None,
           "estimated_objects": round(catalog / covered) if covered > 0 else None,
           "weights": known["weights"] if isinstance(known.get("weights"), list) else []}
    if known.get("spans_refused"):  # spans the remote refuses, passed over (listing/refused.py)
        out["spans_refused"] = int(known["spans_refused"])
    if excluded:
        out["excluded"] = excluded
    return out


LIMIT_MARK = " [object limit "
"""What follows a recorded listing's name when it had an object limit (``list [object limit 750]``):
the listing writes it (listing/lister.py imports it from here: the store is below the listing),
and the store reads the limit back."""


def _empty_warning(db: sqlite3.Connection, excluded: int, skipped: int) -> str:
    """Why a complete listing cataloged nothing, where users look (status, /readyz): a mistyped
    prefix lists nothing; keys it did list were left out by ``--include``/``--exclude`` or skipped
    (larger than the object limit, the sampler's exit 2 names it; a name refused), where "check the
    prefix" would send the user the wrong way."""
    remote = _meta(db, Meta.SAMPLER_REMOTE) or "the remote"
    if skipped:
        _, mark, rest = (_meta(db, Meta.LISTING_SOURCE) or "").rpartition(LIMIT_MARK)
        limit = _size(int(rest[:-1])) if mark and rest.endswith("]") and rest[:-1].isdigit() else None
        left_out = f"; {excluded} left out by --include/--exclude" if excluded else ""
        return (f"0 objects kept of {skipped + excluded} under {remote} for this node: {skipped} skipped, "
                f"larger than the object limit{f' {limit}' if limit else ''} (or names refused: the "
                f"sampler's log says which){left_out}; raise --capacity or --max-object-size")
    if excluded:
        return (f"0 objects kept of {excluded} under {remote} for this node: "
                "--include/--exclude left out every key")
    return empty_shard_words(remote, _meta(db, Meta.SAMPLER_SHARD), _listed_keys(db)) or \
        f"0 objects under {remote} for this node: {prefix_fix(remote)}"



def _listed_keys(db: sqlite3.Connection) -> int:
    """Keys of every shard the last listing run listed (its progress, :data:`Meta.LISTING_PROGRESS`,
    kept after its end); 0 when not known."""
    try:
        known = json.loads(_meta(db, Meta.LISTING_PROGRESS) or "{}")
        return int(known.get("listed", 0)) if isinstance(known, dict) else 0
    except (ValueError, TypeError):
        return 0


def empty_shard_words(remote: str, shard: str | None, listed: int) -> str | None:
    """The empty-listing warning when the prefix is right and the shard is empty: the listing saw
    ``listed`` objects, all of other shards (``shard``: ``index/count``, as
    :data:`Meta.SAMPLER_SHARD` records it), so "check --remote's prefix" would send the user the
    wrong way. None with one shard, nothing listed or no shard known. The sampler's log says the
    same (:func:`epochfs.sidecar.listing.capacity.check_capacity`)."""
    index, _, count = (shard or "").partition("/")
    if not (index.isdigit() and count.isdigit()) or int(count) <= 1 or listed <= 0:
        return None
    return (f"0 objects under {remote} for shard {index} of {count}: this node's shard is empty "
            f"({listed} object(s) listed, all in the other {int(count) - 1} shards); use fewer "
            "shards (--shard-count) or more data")


def awaits_first_round(known: dict[str, Any], wait: float) -> bool:
    """True while the running listing of ``known`` (:func:`listing_known`) has not read a page of
    every folder and began less than ``wait`` seconds ago: the first epoch and the fetches wait
    for that round (docs/sampler.md)."""
    began = float(known.get("began") or 0.0)
    return known.get("first_round") is False and began > 0 and time.time() - began < wait


def known_at_cut(db: sqlite3.Connection) -> tuple[int | None, int | None]:
    """(keys of this shard listed, about how many the remote holds for it): what an epoch cut now
    records, and its manifest's header says; (None, None) before anything is listed."""
    catalog = int(_meta(db, Meta.CATALOG_OBJECTS) or 0)
    if not catalog:
        return None, None
    estimated = listing_known(db, catalog).get("estimated_objects")
    return catalog, max(catalog, int(estimated)) if estimated is not None else catalog


RETRYING_MAX_AGE = 90.0
"""Seconds after which :data:`Meta.SAMPLER_RETRYING` is taken for one a dead supervisor left (killed
with -9): a live one rewrites it at each restart and each start of a retry, at most 30 s apart. By
the time it was written, not its pid: the FUSE server and the trainer may not see that process."""

STATE_FILE_NAME = "sidecar-state.json"
"""File of the cache where the supervisor says what ``epochfs status`` cannot read in the index:
the sampler retrying after a transient failure (its reason, the retry's number, when it starts or
started; present only meanwhile). The supervisor writes it (sidecar/supervisor/observability.py)
and ``epochfs status`` reads it (sidecar/status.py; with ``--mount`` through the mount's source,
``epochfs:<cache>``). Here because those two may not import each other (the layers: .importlinter)
and both import the store, whose retry words (:func:`retry_words`) read the same document. The same
state goes into the index as :data:`Meta.SAMPLER_RETRYING`, because the views render
``status.json`` from the index alone and a trainer reads only the mount."""


def retrying_value(state: dict[str, Any], now: float) -> str:
    """The supervisor's sampler retry state (``waiting``: ``remote unreachable: <reason>``, the
    ``retry``'s number, its ``next_start`` or when it ``started``, wall-clock; the ``pid`` that
    wrote it) as :data:`Meta.SAMPLER_RETRYING`'s JSON, stamped with ``now``."""
    return json.dumps({**state, "written": round(now, 3)}, sort_keys=True)


def retry_line(text: str | None, now: float) -> str | None:
    """``remote unreachable: <reason>; retry 3 in 8 s`` (``...; retry 3 running for 1 s`` while
    that start runs) from :data:`Meta.SAMPLER_RETRYING`'s JSON at wall-clock ``now``: the words of
    ``/readyz``'s reason, rendered when read so that the count runs without a write per second.
    None for no value, a malformed one, or one older than :data:`RETRYING_MAX_AGE`; status.json
    carries it as ``sampler_retrying``."""
    try:
        state = json.loads(text or "null")
        if not isinstance(state, dict) or now - float(state.get("written", 0)) > RETRYING_MAX_AGE:
            return None
        return retry_words(state, now)
    except (ValueError, TypeError):
        return None


def retry_words(state: dict[str, Any], now: float) -> str | None:
    """The retry line of a sampler retry state (``waiting``, ``retry``, ``next_start`` or
    ``started``, wall-clock) at ``now``: the one wording for the index's value (:func:`retry_line`)
    and the supervisor's state file (``epochfs status``); None when it is not retrying."""
    waiting, retry = state.get("waiting"), state.get("retry")
    if not waiting:
        return None
    if state.get("next_start") is not None:
        return f"{waiting}; retry {retry} in {max(0.0, float(state['next_start']) - now):.0f} s"
    if state.get("started") is not None:
        return f"{waiting}; retry {retry} running for {max(0.0, now - float(state['started'])):.0f} s"
    return str(waiting)
