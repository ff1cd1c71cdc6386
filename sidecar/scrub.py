"""Scrubbing the cache: every object file against the size and digest recorded at its admission
(in the algorithm the digest names: the CRC the download was verified with, or md5; see
:mod:`epochfs.sidecar.store.digests`).

Start-up recovery checks sizes only, so a flipped byte on the node volume (bit rot, a bad disk, a
stray write by root) would be served for as long as the sample lives. Two scrubs find it:

* ``epochfs verify --cache DIR`` (:func:`run_verify`): one pass at full speed, a progress line on
  stderr every few seconds, damaged objects *quarantined* (a copy of each file in
  ``<cache>/quarantine/``, why in ``quarantine.log``, the samples marked for a repair in place),
  a summary or ``--json`` on stdout, exit status 1 when anything was damaged. It may run beside a
  running sidecar: it takes nothing but SQLite's write lock for the moment of a quarantine; the
  sampler finds the repairs within seconds.
* the sampler's background scrub (:class:`Scrubber`): a thread of the sampler (the one writer)
  that walks the cache in admission order at ``--scrub-rate`` bytes per second, over and over;
  a damaged object's key is handed back to the sampler, which fetches it again first.

A repair is made in place (:func:`epochfs.sidecar.store.integrity.take_out`): the sample keeps
its row, so every epoch that lists it keeps listing it under the same name, and its object file
stays until the download that repairs it is renamed over it: a reader opens the old file or the
repaired one, never no file (docs/reliability.md, "Repairs keep epochs whole").

Both count what they take out in ``corrupt_objects_total`` (the store's counter, kept across
restarts, exported as ``epochfs_corrupt_objects_total``).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from epochfs.sidecar.config import format_size
from epochfs.sidecar.progressbar import Progress
from epochfs.sidecar.ratelimit import RateLimiter
from epochfs.sidecar.store import Candidate, Store, StoredObject
from epochfs.sidecar.store.integrity import BLOCK, Stopped

log = logging.getLogger("epochfs.scrub")

BATCH = 256
"""Samples read from the index at a time."""
PASS_PAUSE = 1.0
"""Seconds the background scrub waits after a pass before the next (an empty or tiny cache is
not re-read in a tight loop; the byte rate bounds everything else)."""


class Scrubber:
    """The background scrub: a thread reading the cache at a bounded byte rate.

    ``on_damaged`` receives the catalog entry of each damaged sample it took out, from the
    scrub's thread (the sampler queues it and fetches it again first)."""

    def __init__(self, *, store: Store, rate: int, stop: threading.Event,
                 on_damaged: Callable[[Candidate], None], pause: float = PASS_PAUSE) -> None:
        if rate <= 0:
            raise ValueError("the scrub rate must be positive (0 means no scrub: do not start one)")
        self.store = store
        self.stop = stop
        self.on_damaged = on_damaged
        self.pause = pause
        self.limiter = RateLimiter(rate=rate, burst=max(float(BLOCK), rate / 10))
        self.passes = 0
        self.checked = 0
        self.damaged = 0
        self._thread = threading.Thread(target=self._run, name="scrub", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _pace(self, nbytes: int) -> bool:
        return not self.stop.is_set() and self.limiter.take(nbytes, self.stop)

    def _run(self) -> None:
        buffer = memoryview(bytearray(BLOCK))
        cursor = 0
        while not self.stop.is_set():
            try:
                batch = self.store.stored_objects(after_id=cursor, limit=BATCH)
                if not batch:
                    if cursor:
                        self.passes += 1
                    cursor = 0
                    self.stop.wait(self.pause)
                    continue
                for obj in batch:
                    problem = _check(self.store, obj, self._pace, buffer)
                    cursor = obj.id
                    self.checked += 1
                    if problem is not None:
                        self._take_out(obj, problem)
            except Stopped:
                return
            except Exception as e:  # the index busy or full, a file system error: try again later
                log.warning("scrub: %s; trying again in %.0fs", e, self.pause * 10)
                self.stop.wait(self.pause * 10)

    def _take_out(self, obj: StoredObject, problem: str) -> None:
        for taken in self.store.take_out([(obj, problem)], quarantine=False):
            self.damaged += 1
            again = ("fetched again into its place (its epochs keep it)" if taken.refetch is not None
                     else "no longer listed: it cannot be repaired; its entries stay, a read of one "
                          "fails (EIO)")
            log.warning("scrub: cached object of %r is damaged (%s): %s", taken.key, problem, again)
            if taken.refetch is not None:
                self.on_damaged(taken.refetch)


def _check(store: Store, obj: StoredObject, pace: Callable[[int], bool] | None,
           buffer: memoryview) -> str | None:
    """What is wrong with ``obj`` (None: nothing); an object that cannot be read is damaged."""
    try:
        return store.check_object(obj, pace=pace, buffer=buffer)
    except OSError as e:
        return f"unreadable: {e.strerror or e}"


# ---------------------------------------------------------------------------- epochfs verify
class _Progress:
    """Progress on stderr: a bar on a terminal, else a line every ``every`` seconds."""

    def __init__(self, *, objects: int, nbytes: int, every: float, out: TextIO) -> None:
        self.objects, self.nbytes = objects, nbytes
        self.bar = Progress("verify:", out=out, unit="objects", every=every)

    def _detail(self, done_bytes: int, damaged: int) -> str:
        rate = done_bytes / max(time.monotonic() - self.bar.started, 1e-9)
        return (f"{format_size(done_bytes)} of {format_size(self.nbytes)} ({format_size(rate)}/s), "
                f"{damaged} damaged")

    def tick(self, done: int, done_bytes: int, damaged: int) -> None:
        self.bar.update(done, self.objects, self._detail(done_bytes, damaged))

    def close(self, done: int, done_bytes: int, damaged: int) -> None:
        self.bar.close(done, self.objects, self._detail(done_bytes, damaged))


def verify(store: Store, *, quarantine: bool = True, progress_every: float = 5.0,
           err: TextIO | None = None) -> dict[str, Any]:
    """One pass over every object of ``store``: the report :func:`run_verify` prints. Without
    ``quarantine`` nothing is changed (a report only)."""
    started = time.monotonic()
    index = store.index_integrity()
    report: dict[str, Any] = {"cache": str(store.root), "index": index, "objects": 0, "bytes": 0,
                              "ok": 0, "damaged": [], "verified": {}}
    if index == "ok":
        progress = _Progress(objects=store.stats().samples, nbytes=store.cache_bytes(),
                             every=progress_every, out=err or sys.stderr)
        _walk(store, report, quarantine=quarantine, progress=progress)
        progress.close(report["objects"], report["bytes"], len(report["damaged"]))
    report["seconds"] = round(time.monotonic() - started, 3)
    return report


def _walk(store: Store, report: dict[str, Any], *, quarantine: bool, progress: _Progress) -> None:
    buffer = memoryview(bytearray(BLOCK))
    kinds: Counter[str] = Counter()
    damaged: list[dict[str, Any]] = report["damaged"]
    cursor = 0
    while batch := store.stored_objects(after_id=cursor, limit=BATCH):
        bad: list[tuple[StoredObject, str]] = []
        for obj in batch:
            cursor = obj.id
            problem = _check(store, obj, None, buffer)
            report["objects"] += 1
            report["bytes"] += obj.size
            kinds[obj.verified or "unknown"] += 1
            if problem is None:
                report["ok"] += 1
            else:
                bad.append((obj, problem))
            progress.tick(report["objects"], report["bytes"], len(damaged) + len(bad))
        if bad and quarantine:
            damaged += [_entry(t.key, t.sid, t.size, t.problem, t.moved_to)
                        for t in store.take_out(bad, quarantine=True)]
        elif bad:
            damaged += [_entry(o.key, o.sid, o.size, problem, None) for o, problem in bad]
    report["verified"] = dict(sorted(kinds.items()))


def _entry(key: str, sid: str, size: int, problem: str, moved_to: Path | None) -> dict[str, Any]:
    return {"key": key, "sid": sid, "size": size, "problem": problem,
            "quarantined_to": None if moved_to is None else str(moved_to)}


def run_verify(cache: Path, *, as_json: bool, quarantine: bool, progress_every: float,
               out: TextIO | None = None, err: TextIO | None = None) -> int:
    """``epochfs verify``: 0 when every object and the index are sound, 1 otherwise."""
    out = out or sys.stdout
    with Store(cache) as store:
        report = verify(store, quarantine=quarantine, progress_every=progress_every, err=err)
    if as_json:
        print(json.dumps(report, indent=2), file=out)
    else:
        _print_report(report, quarantine=quarantine, out=out)
    return 0 if report["index"] == "ok" and not report["damaged"] else 1


def _print_report(report: dict[str, Any], *, quarantine: bool, out: TextIO) -> None:
    if report["index"] != "ok":
        print(f"index: DAMAGED ({report['index']}); the sampler moves it aside and starts a fresh "
              f"one at its next start", file=out)
        return
    kinds = ", ".join(f"{n} {kind}" for kind, n in report["verified"].items()) or "none"
    print(f"index: ok; {report['objects']} objects, {format_size(report['bytes'])} checked in "
          f"{report['seconds']:.1f}s (verified at admission: {kinds})", file=out)
    for d in report["damaged"]:
        if d["quarantined_to"]:
            where = f"quarantined to {d['quarantined_to']}"
        else:
            where = ("marked for a repair in place (its file was gone)" if quarantine
                     else "left in place (--report-only)")
        print(f"DAMAGED {d['key']}: {d['problem']}; {where}", file=out)
    print(f"{len(report['damaged'])} damaged, {report['ok']} ok", file=out)


__all__ = ["Scrubber", "run_verify", "verify"]
