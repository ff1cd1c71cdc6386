"""What ``epochfs status`` must check before it shows a status document as the truth.

Why a module apart: :mod:`.status` is at its size bound, and each of these is a place where the
view said more than it knew (a reviewer's findings, r53):

* ``--cache`` read the dead sampler's last words as current: a sampler killed with SIGKILL leaves
  its reservations (``inflight_bytes``) and its backpressure in the index, and status showed
  "58.9 KiB in flight" and "backpressure: YES" for ever. The sampler's lock
  (:mod:`.samplerlock`, an ``flock`` the kernel drops at its holder's death, what ``epochfs
  relist`` asks too) says whether one runs: :func:`sampler_facts`.
* the supervisor's saved totals are JSON numbers and were all made floats; counts are ints
  (:func:`totals`).
* a ``status.json`` that is empty, cut short or of another version (a field missing) gave a
  traceback; :func:`mount_document` makes it one line and exit 2, as the other ``--mount`` errors.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from pathlib import Path
from typing import Any

from epochfs.sidecar import samplerlock
from epochfs.sidecar.config import ConfigError
from epochfs.sidecar.store import INDEX_NAME, Policy
from epochfs.sidecar.store.dburi import uri
from epochfs.sidecar.store.outage import parse

NOT_RUNNING = ("sampler: NOT RUNNING (no `epochfs sample` holds this cache's lock): nothing is "
               "fetched or in flight, and no backpressure holds it back")
"""The line ``--cache`` shows when no sampler runs (JSON: ``sampler_running`` false)."""

REQUIRED = ("cache_bytes", "capacity_bytes", "epochs")
"""Fields of a status document without which the view has nothing to draw (the rest default)."""

FLOAT_TOTALS = frozenset({"client_wait_seconds_total"})
"""The supervisor's totals that are seconds; the others are counts (samples, bytes)."""


def sampler_facts(doc: dict[str, Any], cache: Path) -> None:
    """Add ``sampler_running`` to a ``--cache`` document; when no sampler holds the lock, show
    nothing in flight and no backpressure: what the index holds of those is the last words of a
    sampler that stopped (a SIGKILL leaves them), not the state of the cache now."""
    running = samplerlock.held(cache)
    doc["sampler_running"] = running
    if not running:
        doc["inflight_bytes"] = doc["inflight_downloaded_bytes"] = 0
        doc["backpressure"] = False
        doc["backpressure_reason"] = None


def outage_facts(doc: dict[str, Any], record: str | None, cache: Path) -> None:
    """Add ``outage`` (its words) and ``outage_cause`` to a ``--cache`` document while the running
    sampler (the pid in its lock file, :func:`~epochfs.sidecar.samplerlock.holder_pid`) records
    an outage of the remote in the index (:mod:`epochfs.sidecar.store.outage`); none when no
    sampler runs or the record is another run's: a record left by a run killed mid-outage is no
    state of the cache now (the next run removes it as soon as it holds the lock)."""
    outage = parse(record) if doc.get("sampler_running") else None
    if outage is not None and outage.pid == samplerlock.holder_pid(cache):
        doc["outage"], doc["outage_cause"] = outage.words, outage.cause


KEPT, IN_USE = "kept", "in use"
"""The two reasons an epoch is pinned (README, Words), as ``pinned_by`` names them."""


def mark_pins(doc: dict[str, Any], cache: Path, policy: Policy, *,
              now: float | None = None) -> None:
    """Mark each live epoch of a ``--cache`` document ``pinned``, as the README defines it: among
    the newest ``--keep-epochs`` (``kept``) or read by a reader within ``--in-use-seconds`` (``in
    use``); either way it stays and its samples are not evicted. ``pinned_by`` names the reasons
    and ``pinned_epochs`` lists the pinned epochs: what the EpochfsBackpressure runbook asks.

    Both reasons: the epochs a backpressure reason names ("cannot fit beside the kept epochs
    (4-5)") are kept ones. The newest are counted among the index's live epochs, as the store's
    own retirement does (:func:`epochfs.sidecar.store.epochpins.live`).

    The store keeps the reads (``epochs.last_read``, :mod:`epochfs.sidecar.store.epochpins`) and
    says nothing of them in its document, so they are read here, read-only; an index that cannot
    be read now leaves the document without them (the table then has no such column)."""
    now = time.time() if now is None else now
    try:
        db = sqlite3.connect(uri(cache / INDEX_NAME, "ro"), uri=True, timeout=5.0)
        try:
            reads = {int(n): float(t) for n, t in
                     db.execute("SELECT n, last_read FROM epochs WHERE retired=0").fetchall()}
        finally:
            db.close()
    except (sqlite3.Error, TypeError, ValueError):
        return
    kept = set(sorted(reads, reverse=True)[:max(policy.keep_epochs, 0)])
    epochs = doc.get("epochs") or []
    for e in epochs:
        n = int(e["epoch"])
        last = reads.get(n)
        in_use = last is not None and last > 0 and now - last < policy.in_use_seconds
        e["pinned_by"] = [why for why, holds in ((KEPT, n in kept), (IN_USE, in_use)) if holds]
        e["pinned"] = bool(e["pinned_by"])
    doc["pinned_epochs"] = [int(e["epoch"]) for e in epochs if e["pinned"]]


def totals(saved: str) -> dict[str, int | float]:
    """The supervisor's saved totals (a JSON object), counts as ints and seconds as floats.

    Raises ValueError/TypeError/AttributeError on a damaged value (the caller skips it)."""
    out: dict[str, int | float] = {}
    for key, value in json.loads(saved).items():
        out[key] = float(value) if key in FLOAT_TOTALS else int(float(value))
    return out


EPOCH_NUMBERS = ("epoch", "samples", "new", "evicted", "bytes")
"""The whole numbers of a status document's epoch, where it has them (the epochs table shows them)."""


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _not_finite(name: str) -> float:
    raise ValueError(f"{name} where a number is")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text}, a number out of range")
    return value


def mount_document(path: Path, text: str) -> dict[str, Any]:
    """A mount's ``status.json`` as a document, or :class:`ConfigError` (one line, exit 2) when
    it is empty, cut short, not an object, or lacks a field the view needs (another version)."""
    try:
        doc = json.loads(text, parse_constant=_not_finite, parse_float=_finite)
    except json.JSONDecodeError as e:
        what = "empty" if not text.strip() else f"not JSON ({e.msg} at character {e.pos})"
        raise ConfigError(f"--mount: {path} is {what}: not an epochfs status document "
                          "(being rewritten, or damaged)") from None
    except ValueError as e:  # a number no sidecar writes
        raise ConfigError(f"--mount: {path} is not an epochfs status document ({e})") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"--mount: {path} is not an epochfs status document (not a JSON object)")
    missing = [name for name in REQUIRED if name not in doc]
    if missing:
        raise ConfigError(f"--mount: {path} lacks {', '.join(missing)}: a status document of another "
                          "epochfs version? (`epochfs status --cache CACHE` in the sidecar reads the "
                          "index itself)")
    wrong = [name for name in REQUIRED[:2]
             if isinstance(doc[name], bool) or not isinstance(doc[name], (int, float))]
    if not isinstance(doc["epochs"], list) or not all(
            isinstance(e, dict) and all(_whole(e[name]) for name in EPOCH_NUMBERS if name in e)
            for e in doc["epochs"]):
        wrong.append("epochs")
    if wrong:
        raise ConfigError(f"--mount: {path} is not an epochfs status document ({', '.join(wrong)} "
                          "of another kind)")
    return doc


