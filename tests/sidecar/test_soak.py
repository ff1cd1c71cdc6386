"""The soak: the real ``epochfs sidecar`` on an unlucky day, with readers checking every byte.

moto is the remote, behind the fault proxy (tests/faultproxy.py); the cache is a small tmpfs of its
own; eight reader processes (tests/soak_readers.py) read the newest epoch through the mount over and
over and compare every listed file with the remote's object. Meanwhile, at random:

* the sampler child and the FUSE server child are killed with -9 (pids from ``/healthz``);
* object GETs fail (resets, truncated and stalled bodies, garbage, 5xx, 429, flipped bytes) and the
  remote goes down for a few seconds;
* the cache's filesystem fills up (a filler file) and frees again;
* a thread storms the mount with lookups of epochs that must not exist (``epoch-999999``, numbers
  just ahead of the newest, names that are not epoch names).

At the end: wrong bytes must be 0; failed opens of listed files must be 0 except while the FUSE
server restarts (counted apart: the time between a kill, or a restart the monitor saw, and the
mount answering again, plus 2 s); no child restarts but ours; ``/healthz`` never failed but during a
FUSE restart; no stray lookup made an epoch; epoch numbers have no gaps; recovery finds nothing to
repair and every cached object equals the remote's. One summary line is printed (``-rP`` or ``-s``
shows it).

``test_soak_short`` (20 s of soak, about 30 s in all: one kill of each child, one disk-full episode,
one storm, one outage) runs by default; ``test_soak`` (slow) runs for ``EPOCHFS_SOAK_SECONDS``
(default 600) with a random schedule from ``EPOCHFS_SOAK_SEED`` (default 7). Both need root (a
tmpfs, FUSE). ``make test-reliability`` runs the long one.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from common import S3Server, put_objects, wait_until
from digest_helpers import digest_of
from faultproxy import FaultProxy
from inprocess import fill, small_volume
from sidecar_helpers import Sidecar, running_sidecar
from store_helpers import sample_checksums

from epochfs.sidecar.store import Store

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root (a tmpfs for the cache) and FUSE"),
]

BUCKET = "soak"
READERS = Path(__file__).resolve().parents[1] / "soak_readers.py"
FAULTS = ("reset", "reset-body", "truncate", "stall", "garbage", "503", "500", "429", "corrupt")
RESTART_GRACE = 2.0
"""Seconds after the mount answers again during which reader failures still count as the restart's."""


@dataclass
class Plan:
    """What happens when, in seconds from the start of the soak."""

    seconds: float
    objects: int
    kills: list[tuple[float, str]]  # (when, "sampler" | "fuse")
    disk_full: list[tuple[float, float]]  # (when, how long)
    storms: list[float]
    outages: list[tuple[float, float]]
    readers: int = 8


def plan_for(seconds: float, seed: int) -> Plan:
    rng = random.Random(seed)
    if seconds <= 60:  # the short run: each kind of trouble once, at fixed moments
        return Plan(seconds, objects=300, kills=[(seconds * 0.25, "fuse"), (seconds * 0.5, "sampler")],
                    disk_full=[(seconds * 0.55, min(5.0, seconds * 0.2))], storms=[seconds * 0.1],
                    outages=[(seconds * 0.8, 2.0)])
    kills, t = [], 10.0
    while t < seconds - 10:
        kills.append((t, rng.choice(["sampler", "fuse"])))
        t += rng.uniform(15, 40)
    disk, t = [], 30.0
    while t < seconds - 20:
        disk.append((t, rng.uniform(4, 10)))
        t += rng.uniform(45, 90)
    storms = [rng.uniform(5, seconds - 5) for _ in range(max(1, int(seconds / 30)))]
    outages = [(rng.uniform(20, seconds - 10), rng.uniform(2, 5)) for _ in range(max(1, int(seconds / 120)))]
    return Plan(seconds, objects=600, kills=sorted(kills), disk_full=disk, storms=sorted(storms),
                outages=sorted(outages))


def dataset(count: int, seed: int) -> dict[str, bytes]:
    rng = random.Random(seed)
    sizes = [4 << 10, 16 << 10, 64 << 10, 128 << 10, 256 << 10]
    return {f"train/{i:05d}.bin": rng.randbytes(rng.choice(sizes)) for i in range(count)}


@dataclass
class Window:
    """A FUSE server restart: from the kill (or the last healthy probe of the old server) until
    ``/healthz`` shows a new server and a mount that answers."""

    start: float
    old_pid: int | None
    cause: str
    end: float | None = None


@dataclass
class Chaos:
    """The soak's record of what it did and what it saw."""

    car: Sidecar
    proxy: FaultProxy
    volume: Path
    t0: float = field(default_factory=time.time)
    stop: threading.Event = field(default_factory=threading.Event)
    windows: list[Window] = field(default_factory=list)
    kills: dict[str, int] = field(default_factory=lambda: {"sampler": 0, "fuse": 0})
    health_failures: list[tuple[float, int, str]] = field(default_factory=list)
    disk_full_episodes: int = 0
    disk_full_seen: int = 0
    storm_lookups: int = 0
    storm_hits: list[str] = field(default_factory=list)
    storm_near: int = 0
    latest_behind: int = 0
    latest_behind_for: float = 0.0
    storm_errors: list[tuple[float, str]] = field(default_factory=list)
    faults_planned: int = 0
    outages: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def at(self, when: float) -> bool:
        """Wait until ``when`` seconds after the start; False when stopped first."""
        return not self.stop.wait(max(0.0, self.t0 + when - time.time()))

    def in_restart(self, t: float) -> bool:
        with self.lock:
            return any(w.start - 0.2 <= t <= (w.end if w.end is not None else float("inf")) + RESTART_GRACE
                       for w in self.windows)

    # -- the threads
    def monitor(self) -> None:
        """Poll /healthz every 0.2 s: FUSE restarts (ours and any other), and failed probes."""
        doc = self.car.health()
        fuse = doc.get("children", {}).get("fuse", {})
        pid, restarts, last_ok = fuse.get("pid"), int(fuse.get("restarts", 0)), time.time()
        while not self.stop.is_set():
            now = time.time()
            doc = self.car.health()
            fuse = doc.get("children", {}).get("fuse", {})
            healthy = doc["code"] == 200 and doc.get("mount") == "ok" and bool(fuse.get("alive"))
            with self.lock:
                open_windows = [w for w in self.windows if w.end is None]
                if int(fuse.get("restarts", restarts)) > restarts and not open_windows:
                    self.windows.append(Window(last_ok, pid, "restart nobody asked for"))
                restarts = max(restarts, int(fuse.get("restarts", restarts)))
                if healthy:
                    for w in self.windows:
                        if w.end is None and fuse.get("pid") != w.old_pid:
                            w.end = now
                    if all(w.end is not None for w in self.windows):
                        pid, last_ok = fuse.get("pid"), now
            if doc["code"] != 200:
                self.health_failures.append((now, doc["code"], str(doc.get("mount"))))
            self.stop.wait(0.2)

    def killer(self, kills: list[tuple[float, str]]) -> None:
        for when, name in kills:
            if not self.at(when):
                return
            pid = self.car.child_pid(name)
            if pid is None:
                continue  # being restarted: the next one
            with self.lock:
                if name == "fuse":
                    self.windows.append(Window(time.time(), pid, "kill -9"))
                self.kills[name] += 1
            os.kill(pid, signal.SIGKILL)

    def faults(self, keys: list[str], seed: int) -> None:
        """Keep about a third of the keys with a plan of one to three faults (each fewer than the
        sampler's retries), so that most downloads, first fetches and fetches again alike, meet
        some."""
        rng = random.Random(seed)
        while True:
            with self.proxy.lock:
                bare = [k for k in keys if not self.proxy.plan.get(f"/{BUCKET}/{k}")]
            for key in rng.sample(bare, max(0, len(bare) - 2 * len(keys) // 3)):
                plan = [rng.choice(FAULTS) for _ in range(rng.choice([1, 1, 2, 3]))]
                self.proxy.set_plan(f"/{BUCKET}/{key}", plan)
                self.faults_planned += len(plan)
            if self.stop.wait(0.5):
                return

    def outage(self, outages: list[tuple[float, float]]) -> None:
        for when, length in outages:
            if not self.at(when):
                return
            self.proxy.down = "500"  # an outage (a 503 SlowDown is throttling: retried, never an outage)
            self.outages += 1
            self.stop.wait(length)
            self.proxy.down = None

    def disk_full(self, episodes: list[tuple[float, float]]) -> None:
        for when, length in episodes:
            if not self.at(when):
                return
            filler = fill(self.volume, leave=128 << 10)
            self.disk_full_episodes += 1
            try:
                deadline = time.time() + length
                while time.time() < deadline and not self.stop.wait(0.25):
                    if self._backpressure() == "disk full":
                        self.disk_full_seen += 1
                        break
                self.stop.wait(max(0.0, deadline - time.time()))
            finally:
                filler.unlink()

    def _backpressure(self) -> str | None:
        try:
            db = sqlite3.connect(f"file:{self.car.cache / 'index.sqlite'}?mode=ro", uri=True, timeout=5)
            try:
                row = db.execute("SELECT value FROM meta WHERE name='backpressure'").fetchone()
            finally:
                db.close()
        except sqlite3.Error:
            return None
        return str(row[0]) if row else None

    def storm(self, storms: list[float]) -> None:
        """Two seconds of lookups of names that must never make an epoch (far ahead, or not epoch
        names at all), mixed with numbers just ahead of ``latest``. One of those may be the next
        epoch (``latest`` can lag the index by a refresh), which a lookup may cut; that no lookup
        ever jumped ahead is checked at the end: epoch numbers without gaps."""
        for when in storms:
            if not self.at(when):
                return
            end = time.time() + 2.0
            i = 0
            while time.time() < end and not self.stop.is_set():
                try:
                    latest = int(os.readlink(self.car.mount / "latest").removeprefix("epoch-"))
                except (OSError, ValueError):
                    latest = 0
                never = [f"epoch-{999_999 + i}", f"epoch-{10**17 + i}", f"epoch-0{latest}",
                         f"epoch-{latest}x", f"epoch-{10**18 + i}"]
                for name in [*never, f"epoch-{latest + 2 + i % 50}"]:
                    self.storm_lookups += 1
                    try:
                        os.stat(self.car.mount / name)
                    except FileNotFoundError:
                        continue
                    except OSError as e:
                        self.storm_errors.append((time.time(), f"{name}: {e}"))
                        continue
                    if name in never:
                        self.storm_hits.append(name)
                    else:
                        self.storm_near += 1
                i += 1

    def newest_in_index(self) -> int | None:
        try:
            db = sqlite3.connect(f"file:{self.car.cache / 'index.sqlite'}?mode=ro", uri=True, timeout=5)
            try:
                row = db.execute("SELECT MAX(n) FROM epochs").fetchone()
            finally:
                db.close()
        except sqlite3.Error:
            return None
        return None if row is None or row[0] is None else int(row[0])

    def latest_lag(self) -> None:
        """How far ``latest`` on the mount trails the index's newest epoch, and for how long."""
        behind_since: float | None = None
        while not self.stop.wait(0.5):
            newest = self.newest_in_index()
            try:
                latest = int(os.readlink(self.car.mount / "latest").removeprefix("epoch-"))
            except (OSError, ValueError):
                continue
            now = time.time()
            if newest is None or latest >= newest or self.in_restart(now):
                behind_since = None
                continue
            behind_since = behind_since or now
            self.latest_behind = max(self.latest_behind, newest - latest)
            self.latest_behind_for = max(self.latest_behind_for, now - behind_since)


@dataclass
class Summary:
    seconds: float
    readers: dict[str, Any]
    failed_outside: list[dict[str, Any]]
    failed_during_restart: int
    lookup_errors_outside: list[dict[str, Any]]
    restarts: dict[str, int]
    kills: dict[str, int]
    cuts: int
    latest: int | None
    evicted: int
    fetched: int
    skipped: int
    faults: int
    gets: int
    disk_full: str
    storms: str
    health_failures_outside: list[tuple[float, int, str]]

    def line(self) -> str:
        r = self.readers
        return (f"soak {self.seconds:.0f}s: {r['passes']} passes, {r['files']} files, "
                f"{r['bytes'] / 2**30:.2f} GiB read by 8 readers; wrong bytes {r['wrong_bytes']}; "
                f"failed opens of listed files {len(self.failed_outside)} "
                f"(+{self.failed_during_restart} during FUSE restarts); manifest mismatches "
                f"{r['manifest_mismatch']}; restarts sampler {self.restarts['sampler']} fuse "
                f"{self.restarts['fuse']} (kills {self.kills['sampler']}/{self.kills['fuse']}); "
                f"cuts {self.cuts} (latest epoch {self.latest}); fetched {self.fetched}, evicted "
                f"{self.evicted}, skipped {self.skipped}; object GETs {self.gets}, faults injected "
                f"{self.faults}; disk full "
                f"{self.disk_full}; storms {self.storms}; /healthz failures outside restarts "
                f"{len(self.health_failures_outside)}")


def run_soak(s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, plan: Plan, seed: int) -> Summary:
    objects = dataset(plan.objects, seed)
    put_objects(s3, BUCKET, objects)
    expected = tmp_path / "expected"
    for key, body in objects.items():
        (expected / "objects" / key).parent.mkdir(parents=True, exist_ok=True)
        (expected / "objects" / key).write_bytes(body)
    (expected / "checksums.json").write_text(json.dumps(
        {k: digest_of("crc32", b) for k, b in objects.items()}))  # the CRC32 S3 stores at upload
    monkeypatch.setenv("EPOCHFS_READ_TIMEOUT", "2")  # a stalled body is retried in 2 s, not 30
    # Half the budget out of epochs and a short in-use window: samples turn over in seconds, so the
    # remote's faults, eviction and cuts keep happening all along.
    extra = ("--capacity", "12Mi", "--headroom", "0.5", "--min-samples", "10", "--cut-interval", "2",
             "--keep-epochs", "2", "--in-use-seconds", "10", "--concurrency", "8", "--retries", "8")
    with small_volume(tmp_path / "cache", "24m") as volume:
        with FaultProxy(upstream=s3.endpoint) as proxy, \
                running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=proxy.endpoint, extra=extra,
                                ready_timeout=90) as car:
            summary = soak_body(car, proxy, volume, plan, objects, expected, tmp_path, seed)
        # After a clean stop (running_sidecar checked exit 0 within 10 s and nothing left mounted):
        # nothing to repair, every cached object the remote's bytes, epoch numbers without gaps.
        check_cache(volume, objects)
    return summary


def soak_body(car: Sidecar, proxy: FaultProxy, volume: Path, plan: Plan, objects: dict[str, bytes],
              expected: Path, tmp_path: Path, seed: int) -> Summary:
    wait_until(lambda: os.path.lexists(car.mount / "latest") or car.get("/readyz")[0] != 200,
               timeout=30, what="a first epoch")
    chaos = Chaos(car, proxy, volume)
    stop_file = tmp_path / "readers.stop"
    readers = []
    for i in range(plan.readers):
        argv = [sys.executable, str(READERS), "--mount", str(car.mount), "--expected", str(expected),
                "--events", str(tmp_path / f"reader{i}.events"), "--out", str(tmp_path / f"reader{i}.json"),
                "--stop", str(stop_file)]
        readers.append(subprocess.Popen(argv))
    threads = [threading.Thread(target=fn, args=args, daemon=True) for fn, args in (
        (chaos.monitor, ()), (chaos.killer, (plan.kills,)), (chaos.faults, (sorted(objects), seed)),
        (chaos.outage, (plan.outages,)), (chaos.disk_full, (plan.disk_full,)), (chaos.storm, (plan.storms,)),
        (chaos.latest_lag, ()),
    )]
    for t in threads:
        t.start()
    try:
        deadline = chaos.t0 + plan.seconds
        while time.time() < deadline:
            assert car.proc.poll() is None, f"the supervisor exited {car.proc.returncode}"
            time.sleep(min(1.0, max(0.0, deadline - time.time())))
    finally:
        stop_file.touch()
        chaos.stop.set()
        for t in threads:
            t.join(timeout=30)
        for p in readers:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        with contextlib.suppress(FileNotFoundError):
            (volume / "filler").unlink()
    # The last restart must be over before the totals are read.
    wait_until(lambda: car.health()["code"] == 200, timeout=20, what="/healthz after the soak")
    health = car.health()["children"]
    with Store(car.cache) as store:
        stats = store.stats()
    totals: dict[str, Any] = {}
    for i in range(plan.readers):
        out = tmp_path / f"reader{i}.json"
        assert out.exists(), f"reader {i} left no totals (exit {readers[i].returncode})"
        for k, v in json.loads(out.read_text()).items():
            totals[k] = totals.get(k, 0) + v
    events = [json.loads(line) for i in range(plan.readers)
              for line in (tmp_path / f"reader{i}.events").read_text().splitlines()]
    outside = [e for e in events if e["kind"] == "open" and not chaos.in_restart(e["t"])]
    during = sum(1 for e in events if e["kind"] == "open" and chaos.in_restart(e["t"]))
    lookups_outside = [e for e in events if e["kind"] == "lookup" and not chaos.in_restart(e["t"])]
    health_outside = [h for h in chaos.health_failures if not chaos.in_restart(h[0])]
    summary = Summary(
        seconds=plan.seconds, readers=totals, failed_outside=outside, failed_during_restart=during,
        lookup_errors_outside=lookups_outside,
        restarts={name: int(health[name]["restarts"]) for name in ("sampler", "fuse")},
        kills=dict(chaos.kills), cuts=stats.cuts_total, latest=stats.latest_epoch,
        evicted=stats.evicted_total, fetched=stats.fetched_total, skipped=stats.skipped_total,
        faults=sum(proxy.injected.values()), gets=sum(proxy.gets.values()),
        disk_full=f"{chaos.disk_full_episodes} episodes ({chaos.disk_full_seen} seen in status)",
        storms=f"{len(plan.storms)} ({chaos.storm_lookups} lookups, {len(chaos.storm_hits)} made an epoch, "
               f"{chaos.storm_near} found the next one, {len(chaos.storm_errors)} errors)",
        health_failures_outside=health_outside,
    )
    print(summary.line())
    windows = [(round(w.start - chaos.t0, 1), None if w.end is None else round(w.end - w.start, 2), w.cause)
               for w in chaos.windows]
    print(f"FUSE restart windows (start, seconds, cause): {windows}")
    print(f"latest trailed the index by up to {chaos.latest_behind} epoch(s), for up to "
          f"{chaos.latest_behind_for:.1f} s at a time (outside restarts)")
    if outside or lookups_outside:
        print("failures outside restarts:", json.dumps((outside + lookups_outside)[:20], indent=1))

    # What must hold.
    assert totals["wrong_bytes"] == 0, summary.line()
    assert totals["manifest_mismatch"] == 0, summary.line()
    assert outside == [], summary.line()
    assert lookups_outside == [], summary.line()
    assert chaos.storm_hits == [], f"stray lookups made epochs: {chaos.storm_hits[:10]}"
    assert summary.restarts == chaos.kills, f"restarts nobody asked for: {summary.line()}"
    assert health_outside == [], f"/healthz failed outside FUSE restarts: {health_outside[:10]}"
    assert totals["passes"] > plan.readers, "the readers hardly read"
    assert stats.cuts_total >= 3 and stats.fetched_total > 0
    return summary


def check_cache(cache: Path, objects: dict[str, bytes]) -> None:
    with Store(cache) as store:
        report = store.recover()
        assert (report.integrity, report.repairs_marked, report.orphans_removed) == ("ok", 0, 0), report
        for key, _, path in sample_checksums(store):
            assert path.read_bytes() == objects[key], f"cached {key} differs from the remote"
    db = sqlite3.connect(f"file:{cache / 'index.sqlite'}?mode=ro", uri=True)
    try:
        numbers = [int(n) for (n,) in db.execute("SELECT n FROM epochs ORDER BY n")]
    finally:
        db.close()
    assert numbers == list(range(len(numbers))), f"epoch numbers with gaps: {numbers}"


def soak_seconds() -> float:
    return float(os.environ.get("EPOCHFS_SOAK_SECONDS", "600"))


@pytest.mark.slow  # a soak: in make test-reliability, beside the long one (the suite's 10-minute budget)
def test_soak_short(s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_soak(s3, tmp_path, monkeypatch, plan_for(20, seed=1), seed=1)


@pytest.mark.slow
@pytest.mark.timeout(0)
def test_soak(s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seed = int(os.environ.get("EPOCHFS_SOAK_SEED", "7"))
    run_soak(s3, tmp_path, monkeypatch, plan_for(soak_seconds(), seed=seed), seed=seed)
