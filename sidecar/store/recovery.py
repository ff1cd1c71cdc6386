"""Start-up recovery: make a cache folder consistent after a crash, before anything writes.

What a crash can leave, given the order of writes (temp -> fsync -> rename -> dir fsync -> index
commit; eviction: index commit -> unlink): temp files (every one is removed: they are the
downloads that were in flight), objects the index does not know (the last admissions before the
crash) and objects whose rows are gone (the last eviction). Those names are in the recovery
journal (:mod:`.journal`), so a start checks only them: its cost is the window a crash can leave,
never the whole cache. After a clean stop the journal is empty.

The full scan (every sample's object ``stat``-ed, every object file listed, in chunks: flat
memory, linear time) runs at start only when the journal cannot vouch for the folder: an index
without one (new, reset, or from an older epochfs), or a machine that went down under a running
sampler (the index runs with ``synchronous=NORMAL``: its last commits, journal included, may be
lost; the boot id recorded at start, ``Meta.WRITER_RUNNING``, tells). Files deleted by hand or
lost by a faulty volume are found in the background (:mod:`.objectscan`) and by the scrub. A sample
whose object file is found missing or short, here or there, keeps its row: it is marked for
repair in place and fetched again, so no epoch that lists it changes. Before anything writes,
recovery also rewrites the repairs log (:mod:`.repairlog`, what a rebuild of a damaged index
remembers of ``repairs``) from the committed table.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from epochfs.sidecar.store import (
    classes,
    epochs,
    hwm,
    integrity,
    journal,
    memberfiles,
    quarantinestray,
    repairlog,
)
from epochfs.sidecar.store.index import Index, Meta
from epochfs.sidecar.store.objects import ObjectFiles
from epochfs.sidecar.store.records import RecoveryReport, StoredObject, StoreError

log = logging.getLogger("epochfs.store")

CHUNK = 10_000
"""Samples read (or marked for repair) per transaction by recovery."""
BOOT_ID = "/proc/sys/kernel/random/boot_id"


def recount(ix: Index) -> None:
    """Reset the running totals from the samples table; call inside :meth:`Index.write`."""
    count, total = ix.db.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM samples").fetchone()
    ix.set_counter("cache_bytes", int(total))
    ix.set_counter("cache_samples", int(count))


def boot_id() -> str:
    """This boot of the machine (the same in every container on it); "unknown" without /proc."""
    try:
        with open(BOOT_ID, encoding="ascii") as f:
            return f.read().strip() or "unknown"
    except OSError:
        return "unknown"


def _remove_uncut_members(ix: Index, root: Path) -> None:
    """Remove the members files of numbers the index (just checked whole) has no epoch for: a
    cut killed between its file's rename and its commit leaves one (:func:`.memberfiles.at_cut`),
    and a rebuild after a later index damage restored it as an epoch never cut, whose old sample
    rows could push a live epoch's re-admitted sample out (a case tests/store/test_store_model.py reaches).
    A cut committing meanwhile in another process loses its file; the keeper writes it again."""
    with ix.read() as db:
        rows = db.execute("SELECT n, retired, cut_at, max_sample FROM epochs").fetchall()
    cut = {int(r[0]) for r in rows}
    uncut = sorted(n for n in memberfiles.present(root) if n not in cut)
    if uncut:
        memberfiles.discard(root, uncut)
        log.info("removed the members file(s) of epoch(s) %s, never cut (a cut killed before its commit)",
                 uncut)
    # A retirement killed between its file's rename and its commit: its epoch is live, its file
    # is back; then the base files no chained file needs go (:mod:`.memberchain`).
    try:
        memberfiles.tidy(root, {int(r[0]): {"epoch": int(r[0]), "cut_at": float(r[2]),
                                            "max_sample": int(r[3])} for r in rows if not int(r[1])})
    except OSError as e:  # the keeper tries again; the rebuild reads base files as they are
        log.warning("could not tidy the members files' bases (%s)", e)


def recover(ix: Index, files: ObjectFiles, *, integrity: str | None = None) -> RecoveryReport:
    """Remove temp files; then, for the journaled names only (or every object when a full scan
    is needed, see the module's docstring), mark for repair in place the samples whose object is
    missing or has the wrong size and remove objects the index does not know. Runs ``PRAGMA integrity_check``
    unless ``integrity`` gives the result of one just made. Sizes only: the scrub compares
    contents. Marks the writer as running until :func:`stopped`."""
    with ix.lock:
        if integrity is None:
            integrity = ix.integrity()
        if integrity != "ok":
            raise StoreError(f"{ix.path}: integrity check failed: {integrity}")
        root = files.objects_dir.parent
        temp_removed = (files.clear_temps() + hwm.clear_temps(root) + memberfiles.clear_temps(root)
                        + classes.clear_temps(root) + repairlog.clear_temps(root)
                        + quarantinestray.finish_strays(root))
        _remove_uncut_members(ix, root)
        boot = boot_id()
        with ix.read() as db:
            journaled = journal.exists(db)
            running = ix.get(Meta.WRITER_RUNNING)
        if not journaled:
            why = "the index has no recovery journal yet (new, reset or older)"
        elif running is not None and running != boot:
            why = "the machine restarted under a running sampler: the index may have lost its last commits"
        else:
            why = None
        if why is None:
            marked, orphans = _window(ix, files)
        else:
            log.info("start-up check of every object file (%s)", why)
            marked, orphans = _full(ix, files)
        with ix.write() as db:
            if why is not None:
                recount(ix)
                journal.create(db)
            journal.clear(db)  # every name in it was resolved above
            far = epochs.drop_out_of_range(db)
            if far:
                log.warning("dropped epoch(s) %s: above the largest epoch number %d, the view never "
                            "showed them and no later epoch could be cut", far, hwm.MAX_EPOCH)
            ix.put(Meta.INFLIGHT_BYTES, "0")
            ix.put(Meta.WRITER_RUNNING, boot)
            # The repairs log as committed: a mark appended before a commit that never came
            # (kill -9) goes, so a later rebuild never applies it.
            try:
                repairlog.rewrite(db, root)
            except OSError as e:
                log.warning("could not rewrite the repairs log (%s); a rebuild of a damaged index "
                            "may fetch again samples whose repair had landed", e)
    return RecoveryReport(temp_removed, marked, orphans, integrity)


def stopped(ix: Index, files: ObjectFiles) -> None:
    """The writer that recovered stops cleanly: forget the unlinked names, clear the mark."""
    if isinstance(files.journal, journal.Journal):
        files.journal.flush()
    with ix.write() as db:
        db.execute("DELETE FROM meta WHERE name=?", (Meta.WRITER_RUNNING.value,))


def _window(ix: Index, files: ObjectFiles) -> tuple[int, int]:
    """Check the journaled names: a file without its row goes (an interrupted admission or
    eviction, or the file of a lost sample whose removal was cut short); a row whose file is
    missing or short (only a volume that lost writes) is marked for repair in place. The file
    of a sample waiting for its repair stays, whatever it holds: the damaged bytes the take-out
    kept, or a repair that did not commit; the repair is made again over it (a rename), and
    removing it would make every entry that links to it answer ENOENT until then."""
    bad: list[tuple[StoredObject, str]] = []
    orphans = 0
    after = ""
    while True:
        with ix.read() as db:
            sids = journal.names(db, after, CHUNK)
            marks = ",".join("?" * len(sids))
            rows = {str(r[1]): _stored(r) for r in db.execute(
                f"SELECT id, sid, key, size, digest, verified FROM samples WHERE sid IN ({marks}) "
                "AND id NOT IN (SELECT sample FROM repairs)", sids)} if sids else {}
            waiting = _waiting(db, sids)
        for sid in sids:
            if sid in waiting:
                continue
            if sid not in rows:
                orphans += files.unlink(sid)
            elif (size := files.size_of(sid)) != rows[sid].size:
                bad.append((rows[sid], _problem(size, rows[sid].size)))
        if len(sids) < CHUNK:
            break
        after = sids[-1]
    return _repair_in_place(ix, files, bad), orphans


def _waiting(db: sqlite3.Connection, sids: list[str]) -> set[str]:
    """Those of ``sids`` whose sample waits for its repair (not lost): their files stay."""
    if not sids:
        return set()
    marks = ",".join("?" * len(sids))
    return {str(r[0]) for r in db.execute(
        f"SELECT s.sid FROM samples s JOIN repairs r ON r.sample = s.id WHERE r.lost = 0 "
        f"AND s.sid IN ({marks})", sids)}


def _stored(row: tuple[object, ...]) -> StoredObject:
    a, b, c, d, e, f = row
    return StoredObject(int(str(a)), str(b), str(c), int(str(d)), str(e), str(f))


def _problem(size: int, recorded: int) -> str:
    return "missing" if size < 0 else f"size {size}, recorded {recorded}"


def _repair_in_place(ix: Index, files: ObjectFiles, bad: list[tuple[StoredObject, str]]) -> int:
    """Samples whose object file is missing or short at start-up (deleted by hand while the
    sidecar was stopped, or lost by a volume that dropped writes) are marked for repair in place,
    as the scrub and the background scan mark them (:func:`.integrity.take_out`): their rows stay,
    so every epoch that lists them keeps listing them, and the sampler fetches each again into
    its place. Dropping their rows instead would make a file deleted while the sidecar was
    stopped shrink its epochs at the next start."""
    for i in range(0, len(bad), CHUNK):
        taken = integrity.take_out(ix, files, bad[i:i + CHUNK], quarantine=False, corrupt=False)
        for t in taken[:5]:
            if t.refetch is None:
                log.warning("start-up check: the object of %s (%s) is %s and its key is no longer "
                            "listed: its entries stay without their file", t.key, t.sid, t.problem)
            else:
                log.warning("start-up check: the object of %s (%s) is %s: fetched again into its "
                            "place (its epochs keep it)", t.key, t.sid, t.problem)
        if len(taken) > 5:
            log.warning("start-up check: %d more sample(s) lost their object file", len(taken) - 5)
    return len(bad)


def _full(ix: Index, files: ObjectFiles) -> tuple[int, int]:
    """Every sample against its object file, then every object file against the index; the
    samples a chunk at a time in admission order, the files a batch of names at a time (flat
    memory, a ``stat`` per sample). The file of a sample waiting for its repair stays, as in
    :func:`_window` (the repair replaces it); that of a lost sample goes (a take-out cut short
    by a crash: kept, it was served to readers and never checked again)."""
    repaired = 0
    after = 0
    while True:  # in admission order, a chunk at a time: flat memory however many are lost
        objs = integrity.objects_after(ix, after, CHUNK)
        bad = [(obj, _problem(size, obj.size)) for obj in objs
               if (size := files.size_of(obj.sid)) != obj.size]
        repaired += _repair_in_place(ix, files, bad)
        if len(objs) < CHUNK:
            break
        after = objs[-1].id

    def known(names: list[str]) -> set[str]:
        marks = ",".join("?" * len(names))
        with ix.read() as db:
            return {str(r[0]) for r in db.execute(
                f"SELECT sid FROM samples WHERE sid IN ({marks}) "
                "AND id NOT IN (SELECT sample FROM repairs WHERE lost = 1)", names)}

    return repaired, files.remove_orphans(known, batch=500)
