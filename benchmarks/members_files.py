"""What a cut pays for its epoch's members file (issue 20: the file written under the write lock).

For each size (``--members``, default 10,000, 50,000, 100,000, 200,000 and 1,000,000) a store is
made with that many samples (rows written with plain SQL, no object files: the file is made from
the index alone; 45-character keys, md5 checksums and digests, quoted ETags, 64-bit ranks, about
110 KB a sample), and then the cut's own write of epoch 0's file (the whole admission order as one
range, a whole file: what :func:`epochfs.sidecar.store.memberfiles.at_cut` does inside the cut's
write transaction, the limit ``AT_CUT`` lifted) is timed ``--repeat`` times, each in a write
transaction that is rolled back (the file removed with it), by each encoder: ``sql`` (SQLite
renders the member lines, :mod:`epochfs.sidecar.store.memberformat`) and ``python`` (the rows
fetched and encoded in Python, as before; ``--encoders sql`` skips it). The table gives the median
wall time and this process's CPU time of the runs, each with its [min-max], the median per member,
and the file's size; with
``--check`` the last file written is read back as a rebuild reads it and compared with the index.
``--paced`` adds, per encoder, one write of the same file as the sampler's keeper thread makes it
(:func:`epochfs.sidecar.store.memberfiles.write`: read transactions, paced to half a core), the
epoch committed first: its wall time is how long after a cut the keeper's file is in place.
``--ahead EVERY`` measures instead what a cut pays with the keeper's segments written ahead
(:mod:`epochfs.sidecar.store.membersegments`, ``AT_CUT`` as shipped): the samples admitted
``EVERY`` at a time with a keeper look after each (its total time, unpaced), then the cut of a
first epoch of every sample: the cut's own write of its file (chained on the segments, listing
what they do not cover), rolled back. ``--schedule`` measures instead a schedule-mode window of
every sample (a catalog of the same keys and ranks, the listing complete, the window measured
ahead as the sampler does): the keeper's write of the window's file ahead
(:mod:`epochfs.sidecar.store.memberpending`, unpaced), the cut's own part (the check and the
rename of that file, inside the cut's write transaction, rolled back: median [min-max] of
``--repeat``, the file written again before each), and the count the check falls back on when a
sample outside the window was evicted since the file was written.

    .venv/bin/python -m epochfs.benchmarks.members_files
    .venv/bin/python -m epochfs.benchmarks.members_files --members 100000 --repeat 5 --check
    .venv/bin/python -m epochfs.benchmarks.members_files --members 1000000 --repeat 1 --paced
    .venv/bin/python -m epochfs.benchmarks.members_files --members 200000 1000000 --ahead 60000
    .venv/bin/python -m epochfs.benchmarks.members_files --members 1000000 --schedule --repeat 5
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sqlite3
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from epochfs.benchmarks import harness
from epochfs.sidecar.store import (
    INDEX_NAME,
    Policy,
    Schedule,
    Store,
    epochs,
    memberfiles,
    memberformat,
    memberpending,
    membersegments,
)


def make_store(cache: Path, members: int, start: int = 0) -> None:
    """A store of ``members`` samples (index rows only, in admission order); ``start``: add the
    samples numbered from there to a store made before."""
    with Store(cache, create=True) as store:
        store.configure(Policy(capacity=1 << 50, keep_epochs=2, min_samples=1, in_use_seconds=600.0))
    now = time.time()
    rng = random.Random(start)

    def rows() -> Iterator[tuple[object, ...]]:
        for i in range(start, members):
            key = f"train/n{i // 1000:08d}/sample-{i:09d}-abcdefgh.bin"
            sid = hashlib.blake2b(key.encode(), digest_size=16).hexdigest()
            md5 = hashlib.md5(key.encode()).hexdigest()
            yield (sid, key, key, 110_000 + i % 997, f"md5:{md5}", f'"{md5}"', now + i * 1e-3, md5,
                   "etag-md5", rng.getrandbits(63))

    db = sqlite3.connect(cache / INDEX_NAME)
    try:
        with db:
            db.executemany("INSERT INTO samples(sid, key, path, size, checksum, version, admitted_at, "
                           "digest, verified, rank) VALUES(?,?,?,?,?,?,?,?,?,?)", rows())
            # The running totals, as admission keeps them (segments are checked against them).
            db.execute("INSERT OR REPLACE INTO counters(name, value) SELECT 'cache_samples', COUNT(*) "
                       "FROM samples")
            db.execute("INSERT OR REPLACE INTO counters(name, value) SELECT 'cache_bytes', "
                       "COALESCE(SUM(size), 0) FROM samples")
    finally:
        db.close()


_EPOCH = ("INSERT INTO epochs(n, cut_at, samples, bytes, new, evicted, max_sample, last_read, first_sample) "
          "VALUES(0, ?, ?, ?, ?, 0, ?, 0, 1)")
"""Epoch 0 as a snapshot cut records it: the whole admission order, ``first_sample`` 1."""


class _RolledBack(Exception):
    pass


@dataclass
class Result:
    """One figure: wall and CPU seconds, the medians of ``walls`` and ``cpus`` (every run's, for the
    spread beside them) where it was timed more than once."""
    members: int
    encoder: str
    wall_s: float
    cpu_s: float
    file_mb: float
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)

    def cells(self, fmt: str = ".3f") -> tuple[str, str]:
        """The wall and CPU cells of a table: ``median [min-max]`` over the runs, or the one value."""
        if not self.walls:
            return f"{self.wall_s:{fmt}}", f"{self.cpu_s:{fmt}}"
        return harness.spread(self.walls, fmt), harness.spread(self.cpus, fmt)


def timed_runs(members: int, encoder: str, walls: list[float], cpus: list[float], file_mb: float) -> Result:
    """The medians of ``repeat`` runs, the runs kept for their spread (never the best run alone)."""
    return Result(members, encoder, statistics.median(walls), statistics.median(cpus), file_mb, walls, cpus)


def time_write(cache: Path, encoder: str, repeat: int, *, check: bool) -> Result:
    """``repeat`` writes of epoch 0's file by the cut's path, with ``encoder``: their medians."""
    memberformat.SQL_JSON = encoder == "sql"
    walls: list[float] = []
    cpus: list[float] = []
    size = 0
    with Store(cache) as store:
        ix = store._ix
        members, nbytes, top = ix.query("SELECT COUNT(*), SUM(size), MAX(id) FROM samples")[0]
        for _ in range(repeat):
            try:
                with memberfiles.at_cut(cache) as keep, ix.write() as db:
                    db.execute(_EPOCH, (time.time(), members, nbytes, members, top))
                    cpu, wall = harness.self_cpu(), time.perf_counter()
                    assert keep(db, 0), "the file was written"
                    wall, cpu = time.perf_counter() - wall, harness.self_cpu() - cpu
                    walls.append(wall)
                    cpus.append(cpu)
                    size = memberfiles.path_of(cache, 0).stat().st_size
                    if check:
                        _check(cache, db)
                    raise _RolledBack
            except _RolledBack:
                pass
    return timed_runs(int(members), encoder, walls, cpus, size / 1e6)


def time_paced(cache: Path, encoder: str) -> Result:
    """One write of epoch 0's file by the keeper's path (paced), with ``encoder``."""
    memberformat.SQL_JSON = encoder == "sql"
    with Store(cache) as store:
        ix = store._ix
        with ix.write() as db:
            members, nbytes, top = db.execute("SELECT COUNT(*), SUM(size), MAX(id) FROM samples").fetchone()
            db.execute(_EPOCH, (time.time(), members, nbytes, members, top))
        try:
            cpu, wall = harness.self_cpu(), time.perf_counter()
            assert memberfiles.write(ix, cache, 0, stop=threading.Event()), "the file was written"
            wall, cpu = time.perf_counter() - wall, harness.self_cpu() - cpu
            size = memberfiles.path_of(cache, 0).stat().st_size
        finally:
            with ix.write() as db:
                db.execute("DELETE FROM epochs WHERE n=0")
            memberfiles.path_of(cache, 0).unlink(missing_ok=True)
    return Result(int(members), f"{encoder}*", wall, cpu, size / 1e6)


def time_ahead(cache: Path, members: int, every: int) -> tuple[Result, Result, int]:
    """A cut of a first epoch of ``members`` with the keeper's segments ahead of it
    (:mod:`epochfs.sidecar.store.membersegments`, ``AT_CUT`` as shipped): the samples admitted
    ``every`` at a time, a keeper look after each (unpaced: its CPU is what it costs); then the
    cut's own write of epoch 0's file, rolled back. Returns the keeper's total, the cut's, and the
    members the cut listed itself."""
    memberformat.SQL_JSON = True
    kept_cpu = kept_wall = 0.0
    at = 0
    while at < members:
        prev, at = at, min(members, at + every)
        make_store(cache, at, start=prev)
        with Store(cache) as store:
            cpu, wall = harness.self_cpu(), time.perf_counter()
            membersegments.advance(store._ix, cache, memberfiles.AT_CUT)
            kept_wall, kept_cpu = kept_wall + time.perf_counter() - wall, kept_cpu + harness.self_cpu() - cpu
    with Store(cache) as store:
        ix = store._ix
        n, nbytes, top = ix.query("SELECT COUNT(*), SUM(size), MAX(id) FROM samples")[0]
        try:
            with memberfiles.at_cut(cache) as keep, ix.write() as db:
                db.execute(_EPOCH, (time.time(), n, nbytes, n, top))
                cpu, wall = harness.self_cpu(), time.perf_counter()
                assert keep(db, 0), "the file was written at the cut"
                wall, cpu = time.perf_counter() - wall, harness.self_cpu() - cpu
                path = memberfiles.path_of(cache, 0)
                own = int(path.read_bytes().rsplit(b'"end":', 1)[1].split(b",", 1)[0])
                raise _RolledBack
        except _RolledBack:
            pass
    return (Result(int(n), "keeper", kept_wall, kept_cpu, 0.0), Result(int(n), "cut", wall, cpu, 0.0), own)


def time_schedule(cache: Path, members: int, repeat: int) -> tuple[Result, Result, Result]:
    """A schedule-mode window of ``members`` (every sample, see the module's docstring): the
    keeper's write of its file ahead (the last of ``repeat``), the median of ``repeat`` cuts' own
    part (the check and the rename, rolled back), and the fallback count of the window."""
    memberformat.SQL_JSON = True
    make_store(cache, members)
    policy = Policy(capacity=1 << 50, keep_epochs=2, min_samples=1, in_use_seconds=600.0,
                    schedule=Schedule(initial=members, growth=1.0))
    db = sqlite3.connect(cache / INDEX_NAME)
    try:
        with db:
            db.execute("INSERT INTO catalog(key, path, sid, size, version, rank) "
                       "SELECT key, key, sid, size, checksum, rank FROM samples")
            db.execute("INSERT OR REPLACE INTO meta(name, value) VALUES('listing_complete', '1')")
    finally:
        db.close()
    keeper = Result(members, "", float("inf"), float("inf"), 0.0)
    walls: list[float] = []
    cpus: list[float] = []
    with Store(cache) as store:
        store.configure(policy)
        assert store.cut_ready(0), "the window is complete and measured ahead"
        ix = store._ix
        for _ in range(repeat):
            cpu, wall = harness.self_cpu(), time.perf_counter()
            assert memberpending.write_ahead(ix, cache) == 0, "the file was written ahead"
            keeper = Result(members, "keeper", time.perf_counter() - wall, harness.self_cpu() - cpu,
                            memberpending.path_for(cache, 0).stat().st_size / 1e6)
            try:
                with memberfiles.at_cut(cache) as keep, ix.write() as db:
                    epochs._insert_epoch(db, policy, 0)
                    cpu, wall = harness.self_cpu(), time.perf_counter()
                    assert keep(db, 0), "the file was put in place at the cut"
                    wall, cpu = time.perf_counter() - wall, harness.self_cpu() - cpu
                    walls.append(wall)
                    cpus.append(cpu)
                    if memberfiles.path_of(cache, 0).read_bytes()[:1] != b"{":
                        harness.fail("the file in place does not start with its first line")
                    raise _RolledBack
            except _RolledBack:
                pass
        cut = timed_runs(members, "cut", walls, cpus, keeper.file_mb)
        head = memberformat.header(ix.read, 0)
        assert head is None, "rolled back"
        ends = ix.query("SELECT lo_rank, lo_key, hi_rank, hi_key FROM ahead WHERE n=0")[0]
        with ix.read() as db:
            cpu, wall = harness.self_cpu(), time.perf_counter()
            assert memberpending._between(db, ends, 1 << 62) == members
            counted = Result(members, "count", time.perf_counter() - wall, harness.self_cpu() - cpu, 0.0)
    return keeper, cut, counted


def _check(cache: Path, db: sqlite3.Connection) -> None:
    """The file read back as a rebuild reads it gives every row of the index, value for value."""
    from epochfs.sidecar.store.memberrestore import _parse

    lines = _parse(memberfiles.path_of(cache, 0), 0)
    next(lines)
    got = [tuple(r) for rows in lines for r in rows]
    want = db.execute(f"SELECT {memberformat.COLUMNS} FROM samples s ORDER BY s.id").fetchall()
    if got != want:
        harness.fail("the file read back differs from the index")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, nargs="+", default=[10_000, 50_000, 100_000, 200_000, 1_000_000])
    ap.add_argument("--encoders", nargs="+", choices=["sql", "python"], default=["sql", "python"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--check", action="store_true", help="read the file back and compare it with the index")
    ap.add_argument("--paced", action="store_true", help="also time the keeper's paced write (encoder*)")
    ap.add_argument("--ahead", type=int, default=0, metavar="EVERY",
                    help="instead: a first epoch cut with segments written ahead, EVERY admissions a look")
    ap.add_argument("--schedule", action="store_true",
                    help="instead: a schedule-mode window whose file the keeper wrote ahead")
    ap.add_argument("--dir", type=Path, default=None,
                    help=harness.DIR_HELP + " (default: the system's temp folder)")
    args = ap.parse_args(argv)
    if "sql" in args.encoders and not memberformat.SQL_JSON:
        harness.fail(f"this SQLite ({sqlite3.sqlite_version}) has no JSON functions")
    if args.ahead:
        return _main_ahead(args.members, args.ahead, args.dir)
    if args.schedule:
        return _main_schedule(args.members, args.repeat, args.dir)
    memberfiles.AT_CUT = 1 << 62  # every size is written at the cut here
    table = harness.Table(("members", ">9,d"), ("encoder", "7s"), ("wall s", ">19s"), ("cpu s", ">19s"),
                          ("us/member", ">9.2f"), ("file MB", ">8.1f"))
    print(f"SQLite {sqlite3.sqlite_version}; median [min-max] of {args.repeat} (us/member: the median)")
    print(table.header())
    for members in args.members:
        with harness.work_dir(args.dir, prefix="epochfs-bench-members-") as scratch:
            cache = scratch / "cache"
            make_store(cache, members)
            for encoder in args.encoders:
                r = time_write(cache, encoder, args.repeat, check=args.check)
                per_member = r.wall_s / r.members * 1e6
                print(table.row(r.members, r.encoder, *r.cells(), per_member, r.file_mb), flush=True)
            for encoder in args.encoders if args.paced else []:
                r = time_paced(cache, encoder)  # one write: its cells are the one value
                per_member = r.wall_s / r.members * 1e6
                print(table.row(r.members, r.encoder, *r.cells(), per_member, r.file_mb), flush=True)
    return 0


def _main_ahead(sizes: list[int], every: int, where: Path | None) -> int:
    print(f"SQLite {sqlite3.sqlite_version}; AT_CUT {memberfiles.AT_CUT:,}, a keeper look every "
          f"{every:,} admissions")
    table = harness.Table(("members", ">9,d"), ("who", "7s"), ("wall s", ">7.3f"), ("cpu s", ">7.3f"),
                          ("listed", ">9,d"))
    print(table.header())
    for members in sizes:
        with harness.work_dir(where, prefix="epochfs-bench-members-") as scratch:
            keeper, cut, own = time_ahead(scratch / "cache", members, every)
            print(table.row(members, "keeper", keeper.wall_s, keeper.cpu_s, members), flush=True)
            print(table.row(members, "cut", cut.wall_s, cut.cpu_s, own), flush=True)
    return 0


def _main_schedule(sizes: list[int], repeat: int, where: Path | None) -> int:
    print(f"SQLite {sqlite3.sqlite_version}; a window of every sample; the cut's part median [min-max] "
          f"of {repeat}")
    table = harness.Table(("members", ">9,d"), ("who", "7s"), ("wall s", ">19s"), ("cpu s", ">19s"),
                          ("file MB", ">8.1f"))
    print(table.header())
    for members in sizes:
        with harness.work_dir(where, prefix="epochfs-bench-members-") as scratch:
            for r in time_schedule(scratch / "cache", members, repeat):
                print(table.row(members, r.encoder, *r.cells(), r.file_mb), flush=True)
    return 0


if __name__ == "__main__":
    harness.entry(main, "members_files")
