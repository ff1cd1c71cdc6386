"""Admitting verified downloads: the one write that makes samples visible in the cache.

Apart from :mod:`.cache` because it is the store's longest rule: the order temp -> rename into
``objects/`` -> dir fsync -> index commit (DESIGN.md), a batch checked against what the index holds
before any file moves, a sample waiting for its repair in place repaired instead
(:func:`.integrity.repair`), a sample fetched again while cached (or whose repair landed after it
was marked lost, or whose key is held back: :mod:`.heldback`) dropped, and files given back when
the install or the commit fails.
:meth:`.Store.admit` calls :func:`admit`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from epochfs.sidecar.store import heldback, integrity
from epochfs.sidecar.store.index import Index, Meta
from epochfs.sidecar.store.objects import ObjectFiles
from epochfs.sidecar.store.records import Admission


def admit(ix_of: Callable[[], Index], files: ObjectFiles, items: list[Admission], *,
          inflight_bytes: int | None = None) -> int:
    """Make verified downloads visible: rename into objects/, fsync dirs, then commit the index;
    returns the bytes the cache's total grew by (a sample repaired in place or dropped as fetched
    again adds none), what the sampler's reservations add to the total they keep.

    The caller has already fsynced each temp file. ``inflight_bytes``: the downloads still in
    flight once these are in, recorded in the same transaction so that status never counts a
    sample twice. A crash before the commit leaves objects the index does not know; recovery
    removes them. ``ix_of``: the process's index at each use (:class:`.IndexHandle` follows a
    replaced one), as the store's own methods read it.
    """
    if not items:
        return 0
    keys = [a.key for a in items]
    sids = [a.sid for a in items]
    if len(set(keys)) != len(keys) or len(set(sids)) != len(sids):
        raise ValueError("a sample is admitted twice in one batch")
    marks = ",".join("?" * len(items))
    known = ix_of().query(
        "SELECT s.key, s.sid, s.id, s.size, s.digest, s.version, r.lost FROM samples s "
        f"LEFT JOIN repairs r ON r.sample = s.id WHERE s.key IN ({marks}) OR s.sid IN ({marks})",
        (*keys, *sids))
    by_key = {a.key: a for a in items}
    waiting: dict[str, Any] = {}  # samples waiting for a repair in place: this is it
    again: list[str] = []
    # The same sample downloaded again while its first download was being admitted (the fetch
    # order had queued the key before it was cached): the cached object stays, the second copy
    # is dropped, the rest of the batch is admitted. It stopped the sampler before.
    # A repair download that lands after its sample was marked lost (a relist dropped or skipped
    # the key while it was in flight: integrity.lose_unfetchable) is dropped too, not admitted as
    # the repair: lost is final (the FUSE view already fails reads of it, the repair log says
    # lost, its file is gone and journaled), and the catalog no longer vouches for the key.
    late: list[str] = []
    clashes: list[str] = []
    for r in known:
        key, a = str(r[0]), by_key.get(str(r[0]))
        if a is None or a.sid != str(r[1]):
            clashes.append(key)
        elif r[6] == 0:
            waiting[key] = r
        elif r[6] is None:
            again.append(key)
        else:
            late.append(key)
    if clashes:
        # Installing first would replace the object a live epoch lists, then lose it to the
        # failed insert's clean-up: refuse before touching any file.
        raise ValueError(f"already in the cache: {', '.join(sorted(clashes))}")
    _drop(by_key, again, "fetched again while cached")
    _drop(by_key, late, "whose repair landed after they were marked lost")
    dropped = {*again, *late}
    held = _held_back(ix_of(), [a for a in items if a.key not in waiting and a.key not in dropped])
    _drop(by_key, held, "held back (a retired epoch's folder may still name their objects)")
    dropped.update(held)
    if waiting:
        integrity.repair(ix_of(), files, [(by_key[k], int(r[2]), int(r[3]), str(r[4]), str(r[5]))
                                          for k, r in waiting.items()])
    items = [a for a in items if a.key not in waiting and a.key not in dropped]
    if not items:
        if inflight_bytes is not None:
            ix = ix_of()
            with ix.write():
                ix.put(Meta.INFLIGHT_BYTES, str(inflight_bytes))
        return 0
    now = time.time()
    ix = ix_of()
    try:
        items = files.install(items)  # less a temp found replaced since its download (dropped)
        with ix.write() as db:
            for a in items:
                db.execute(
                    "INSERT INTO samples(sid, key, path, size, checksum, version, admitted_at, "
                    "digest, verified, rank) VALUES(?,?,?,?,?,?,?,?,?,"
                    "(SELECT rank FROM catalog WHERE key=?))",
                    (a.sid, a.key, a.key, a.size, a.checksum, a.version, now, a.local_digest,
                     a.verified, a.key),
                )
            total = sum(a.size for a in items)
            ix.bump("fetched_total", len(items))
            ix.bump("cache_samples", len(items))
            ix.bump("cache_bytes", total)
            ix.bump("fetched_bytes_total", total)
            if inflight_bytes is not None:
                ix.put(Meta.INFLIGHT_BYTES, str(inflight_bytes))
    except BaseException:
        # Nothing references them: give their room back now rather than at the next recovery
        # (an install that fails part way, or the commit, is most often a full disk). Samples
        # not yet renamed have no object to remove; their temps are the caller's.
        files.remove(a.sid for a in items)
        raise
    return total


def _held_back(ix: Index, items: list[Admission]) -> list[str]:
    """The keys of ``items`` held back from a fetch (:mod:`.heldback`): the fetch order does not
    offer them, and one whose download began before its hold must not land either, or an old
    epoch's folder would show its new bytes."""
    with ix.read() as db:
        held = heldback.among(db, [a.sid for a in items])
    return [a.key for a in items if a.sid in held]


def _drop(by_key: dict[str, Admission], keys: list[str], why: str) -> None:
    """Remove the temps of downloads no longer wanted and say so: the rest of the batch is
    admitted, and the sampler keeps running."""
    for key in keys:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(by_key[key].temp)
    if keys:
        logging.getLogger("epochfs.store").info(
            "dropped %d sample(s) %s: %s", len(keys), why, ", ".join(sorted(keys)[:5]))
