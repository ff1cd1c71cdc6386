"""Occupancy, counters and live epochs in one consistent read: ``status.json``, ``epochfs status``,
the metrics collector and the Kubernetes status annotation all show this one document.

Nothing here scans a table that grows with the cache: samples and bytes are the running totals
(``cache_samples``, ``cache_bytes``) that admission, eviction and the scrub keep in the same
transactions as their rows (recovery recounts them at the sampler's start), and the epochs, queued
cuts and counters are a few rows each. The FUSE server reads this twice a second."""

from __future__ import annotations

from epochfs.sidecar.store.index import Index, Meta
from epochfs.sidecar.store.meta import COUNTER_NAMES
from epochfs.sidecar.store.records import Policy, Stats


def read_stats(ix: Index, policy: Policy) -> Stats:
    with ix.read() as db:
        counters = dict(db.execute("SELECT name, value FROM counters").fetchall())
        samples, nbytes = counters.get("cache_samples", 0), counters.get("cache_bytes", 0)
        inflight = int(ix.get(Meta.INFLIGHT_BYTES) or 0)
        # "1" was written by epochfs before the reason was recorded.
        reason = {"0": "", "1": "cache full"}.get(ix.get(Meta.BACKPRESSURE) or "", ix.get(Meta.BACKPRESSURE))
        catalog = int(ix.get(Meta.CATALOG_OBJECTS) or 0)
        pending = [int(r[0]) for r in db.execute("SELECT n FROM cut_requests ORDER BY n")]
        epochs = [
            {"epoch": int(a), "samples": int(b), "bytes": int(c), "new": int(d),
             "evicted": int(e), "cut_at": float(f)}
            for a, b, c, d, e, f in db.execute(
                "SELECT n, samples, bytes, new, evicted, cut_at FROM epochs WHERE retired=0 ORDER BY n"
            )
        ]
    return Stats(
        cache_bytes=int(nbytes),
        capacity_bytes=policy.capacity,
        samples=int(samples),
        inflight_bytes=inflight,
        backpressure=bool(reason),
        backpressure_reason=reason or None,
        catalog_objects=catalog,
        pending_cuts=pending,
        epochs=epochs,
        latest_epoch=int(epochs[-1]["epoch"]) if epochs else None,
        mode="schedule" if policy.schedule else "snapshot",
        **{k: int(counters.get(k, 0)) for k in COUNTER_NAMES},
    )
