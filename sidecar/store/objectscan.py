"""The background scan of the object files: what start-up recovery does not check.

Start-up recovery checks only the names in the recovery journal (:mod:`.journal`), the window a
crash can leave. A file deleted by hand, or lost by a volume that dropped writes, is outside that
window; this scan finds it. The sampler's background index check (:class:`.checkup.Background`) runs
it when the sampler starts (a file deleted while it was stopped) and after each full check of the
index passes (every 6 hours), paced to :data:`.checkup.DUTY` of one
core (a ``stat`` per sample and a listing of ``objects/``: metadata only; the scrub reads bytes):

* first, a fan-out folder of ``objects/`` that is a link or not a folder is replaced by a folder,
  and an object file that is a symbolic link is removed, never followed (:func:`.fanout.planted`:
  another process on the cache volume planted it), with one WARNING line; the samples they stood
  for are then missing, and taken out as below;
* a sample whose object is missing or has another size is taken out as the scrub takes out a
  damaged one (:func:`.integrity.take_out`: marked for a repair in place, its row and every
  epoch's entry kept, ``corrupt_objects_total`` counts it), one WARNING line
  each, saying whether it is fetched again; the sampler fetches it again into its place
  (``repairs``, every few seconds) unless the remote no longer lists its key;
* an object file that neither a sample nor the journal names is removed (the index lost the
  commit that admitted it). The question and the unlink are asked under the index's write lock,
  and an admission journals its names under that lock before it renames, so an admission in
  flight is never taken for an orphan. Without a journal (an index not yet recovered) no file is
  removed: the next start's full scan does it;
* a file of a sample marked lost (it cannot be fetched again, so nothing installs one) is removed:
  a take-out cut short by a crash of another process (``epochfs verify`` killed between its commit
  and the move) leaves the damaged file there, and the sampler's next start is far off.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from epochfs.sidecar.store import fanout, integrity, journal
from epochfs.sidecar.store.checkup import DUTY, Pace
from epochfs.sidecar.store.index import Index
from epochfs.sidecar.store.objects import ObjectFiles
from epochfs.sidecar.store.records import StoredObject

log = logging.getLogger("epochfs.store")

CHUNK = 2000
"""Samples read per query."""
BATCH = 500
"""Object names asked about (and removed) per write transaction."""


@dataclass(frozen=True)
class ScanReport:
    samples: int
    lost: int
    """Samples whose object file was missing or short: marked for repair in place and counted in
    ``corrupt_objects_total``, as the scrubs count a damaged one."""
    orphans: int
    stale: int = 0
    """Files of samples marked lost, removed (a damaged file a crashed take-out left)."""
    planted: int = 0
    """Fan-out folders that were links or not folders (replaced by folders) and object files that
    were links (removed), before the samples were checked: their samples are then missing."""


def scan(index: Callable[[], Index], files: ObjectFiles, stop: threading.Event, *,
         duty: float = DUTY) -> ScanReport | None:
    """One paced pass over every sample and every object file; None when ``stop`` ended it."""
    pace = Pace(stop, duty)
    started = time.monotonic()
    samples = lost = 0
    after = 0
    fans, links = fanout.planted(str(files.objects_dir), pace)
    if fans or links:
        log.warning("object scan: %d fan-out folder(s) of objects/ were links or not folders (replaced "
                    "by folders: %s) and %d object file(s) were symbolic links (removed: %s); nothing "
                    "is read or written through a link, and the samples they stood for are fetched "
                    "again into their place", len(fans), ", ".join(fans[:3]) or "-", len(links),
                    ", ".join(links[:3]) or "-")
    while True:
        objs = integrity.objects_after(index(), after, CHUNK)
        damaged: list[tuple[StoredObject, str]] = []
        for obj in objs:
            if not pace():
                return None
            size = files.size_of(obj.sid)
            if size != obj.size:
                damaged.append((obj, "missing" if size < 0 else f"size {size}, recorded {obj.size}"))
        samples += len(objs)
        if damaged:
            taken = integrity.take_out(index(), files, damaged, quarantine=False)
            lost += len(taken)
            for t in taken:
                again = ("fetched again into its place (its epochs keep it)" if t.refetch is not None
                         else "its key is no longer listed: its entries stay, a read of one fails (EIO)")
                log.warning("object scan: the object of %s (%s) is %s: %s", t.key, t.sid, t.problem, again)
        if len(objs) < CHUNK:
            break
        after = objs[-1].id
    stale = _remove_stale(index(), files)
    if stale:
        log.warning("object scan: removed %d file(s) of samples marked lost (a take-out cut short by "
                    "a crash left them: damaged bytes)", stale)
    orphans = 0
    names: list[str] = []
    for entry in files.names():
        if not pace():
            return None
        names.append(entry.name)
        if len(names) >= BATCH:
            orphans += _remove_orphans(index(), files, names)
            names = []
    if names:
        orphans += _remove_orphans(index(), files, names)
    if orphans:
        log.warning("object scan: removed %d object file(s) the index does not know", orphans)
    log.info("object scan: %d samples checked in %.1fs, %d missing or short (marked for repair in "
             "place), %d orphan(s) removed", samples, time.monotonic() - started, lost, orphans)
    return ScanReport(samples, lost, orphans, stale, len(fans) + len(links))


def _remove_stale(ix: Index, files: ObjectFiles) -> int:
    """Unlink the object files of samples marked lost, under the write lock (nothing installs a
    file for one: an admission of its key is refused, a repair installs only for a sample still
    due); returns how many were there."""
    removed = 0
    after = ""
    while True:
        with ix.write() as db:
            sids = [str(r[0]) for r in db.execute(
                "SELECT s.sid FROM repairs r JOIN samples s ON s.id = r.sample "
                "WHERE r.lost = 1 AND s.sid > ? ORDER BY s.sid LIMIT ?", (after, BATCH))]
            removed += sum(files.unlink(sid) for sid in sids)
        if len(sids) < BATCH:
            return removed
        after = sids[-1]


def _remove_orphans(ix: Index, files: ObjectFiles, names: list[str]) -> int:
    marks = ",".join("?" * len(names))
    removed = 0
    with ix.write() as db:
        if not journal.exists(db):
            return 0
        known = {str(r[0]) for r in db.execute(
            f"SELECT sid FROM samples WHERE sid IN ({marks}) "
            f"UNION SELECT sid FROM {journal.TABLE} WHERE sid IN ({marks})", names + names)}
        for name in names:
            if name not in known:
                removed += files.unlink(name)
    return removed
