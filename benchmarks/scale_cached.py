"""How epochfs's costs grow with the samples already cached: the real sidecar restarted on a cache
of 10k, 100k, (1M) samples (issue 14's measurements "with 1M cached samples").

:mod:`epochfs.benchmarks.scale` fetches its samples through the sampler, so it measures with a few
thousand cached. Here each size gets a cache seeded in minutes (:mod:`._cached_seed`: through the
store's own code, a complete catalog of ``--keys`` keys and the first ``--cached`` of them in the
sampling order as samples of ``--size`` bytes, epoch 0 cut, as a sampler leaves it at a clean
stop), then the real ``epochfs sidecar`` (supervisor, sampler, FUSE server) is started on it
against the synthetic S3 endpoint (:mod:`.synthetic_s3`, serving the same bucket), and:

- **restart**: from the start to the next sample fetched (a new admission) and to ``/readyz``, and
  to ``stat epoch-0`` through the mount (the seeded epoch, served);
- **RSS** of the supervisor, the sampler and the FUSE server (when ready, and at the end);
- ``epochfs status --json`` and ``epochfs cut`` as processes, beside the start-up of a bare
  ``python`` in the same run (the baseline: most of a CLI's time is its start-up);
- a **lookup cut** (``stat epoch-N`` of a new N through the mount);
- a **fresh epoch's scandir** (every folder of the epoch the lookup cut, all the cached samples,
  walked once through the mount) and the FUSE server's RSS growth over it, per file listed;
- **index** size on disk (``index.sqlite`` with its WAL) at the end;
- the endpoint's LIST pages (0: the catalog is complete, nothing is listed) and GETs.

The catalog is seeded, not listed through the endpoint: listing 2M keys over HTTP takes minutes
(docs/scale.md) and would run beside every measurement; a restart with a complete catalog lists
nothing, which is the case measured. Output: markdown (``--markdown FILE`` too) and JSON, and with
``--plot FILE.png`` each figure against the samples cached (:mod:`._scale_cached_plot`).

    epochfs bench scale_cached                                   # 10k cached (20k keys), ~30 s
    python -m epochfs.benchmarks.scale_cached --cached 10k,100k,1M --json c.json --markdown c.md
    python -m epochfs.benchmarks.scale_cached --cached 10k,100k --json c.json --plot c.png
    python -m epochfs.benchmarks.scale_cached --cached 2000 --verify     # a smoke run (seconds)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from epochfs.benchmarks import harness
from epochfs.benchmarks._cached_seed import REMOTE, SEED, seed
from epochfs.benchmarks._sidecar_probes import (
    exists,
    get_json,
    pids,
    ready,
    rss_mb,
    timed_run,
    walk,
)
from epochfs.benchmarks._synthetic_data import Dataset
from epochfs.benchmarks.scale import label, parse_count

NAN = float("nan")


@dataclass
class Result:
    cached: int
    keys: int
    classes: int
    size: int
    seed_s: dict[str, float] = field(default_factory=dict)
    """Seconds per seeding step (catalog, samples, cut, check): not measurements of epochfs."""
    verify: dict[str, object] = field(default_factory=dict)
    """``epochfs verify --json`` of the seeded cache (``--verify``)."""
    restart_sample_s: float = NAN
    restart_ready_s: float = NAN
    restart_epoch_s: float = NAN
    python_start_s: float = NAN
    status_s: float = NAN
    cut_cli_s: float = NAN
    lookup_cut_s: float = NAN
    lookup_cut_made: bool = False
    """The lookup made the epoch (it was not there before the ``stat``)."""
    scandir_s: float = NAN
    scandir_files: int = 0
    fuse_bytes_per_file: float = NAN
    index_bytes: int = 0
    seeded_index_bytes: int = 0
    fetched: int = 0
    """Samples the sidecar fetched while it ran (above the seeded ones)."""
    rss_mb: dict[str, float] = field(default_factory=dict)
    server: dict[str, int] = field(default_factory=dict)


@contextlib.contextmanager
def endpoint(keys: int, classes: int, size: int, latency: float, log: Path) -> Iterator[str]:
    """The synthetic S3 endpoint serving the seeded bucket, in its own process, for a ``with``."""
    port = harness.free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [*harness.PYTHON, "-m", "epochfs.benchmarks.synthetic_s3", "--keys", str(keys), "--classes",
           str(classes), "--size", str(size), "--port", str(port), "--list-latency", str(latency)]
    with harness.running(cmd, what="synthetic S3", ready=lambda: bool(get_json(url + "/_stats")), log=log):
        yield url


def index_bytes(cache: Path) -> int:
    return sum(p.stat().st_size for p in cache.glob("index.sqlite*"))


def _query(cache: Path, sql: str) -> int:
    """One number from the index, read-only (no lock taken: the sidecar is never waited on)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{cache / 'index.sqlite'}?mode=ro", uri=True,
                                                timeout=5)) as db:
            return int(db.execute(sql).fetchone()[0] or 0)
    except sqlite3.Error:
        return 0


def newest_sample(cache: Path) -> int:
    """The highest admission id: a new admission raises it (one b-tree step, not a count)."""
    return _query(cache, "SELECT max(id) FROM samples")


def newest_epoch(cache: Path) -> int:
    return _query(cache, "SELECT max(n) FROM epochs")


def first_times(checks: dict[str, Callable[[], bool]], proc: subprocess.Popen[bytes], *, started: float,
                timeout: float, log: Path, interval: float = 0.02) -> dict[str, float]:
    """Seconds from ``started`` until each check first holds, all polled in one loop."""
    seen: dict[str, float] = {}
    while len(seen) < len(checks):
        for name, check in checks.items():
            if name not in seen and check():
                seen[name] = time.perf_counter() - started
        if time.perf_counter() - started > timeout:
            missing = sorted(set(checks) - set(seen))
            harness.fail(f"not within {timeout:.0f} s: {missing}{harness.log_tail(log)}")
        if proc.poll() is not None:
            harness.fail(f"the sidecar exited with status {proc.returncode}{harness.log_tail(log)}")
        time.sleep(interval)
    return seen


def verify(cache: Path, env: dict[str, str]) -> dict[str, object]:
    """The store's own check of every object against its recorded digest (changes nothing)."""
    done = subprocess.run([*harness.EPOCHFS, "verify", "--cache", str(cache), "--json", "--report-only",
                           "--progress-seconds", "0"], env=env, capture_output=True, text=True, timeout=3600)
    report = json.loads(done.stdout) if done.stdout.strip() else {}
    return {"returncode": done.returncode, "index": report.get("index"), "objects": report.get("objects"),
            "ok": report.get("ok"), "damaged": len(report.get("damaged", []))}


def measure(cached: int, ns: argparse.Namespace, folder: Path) -> Result:
    keys = ns.keys if ns.keys else ns.keys_per_cached * cached
    classes = ns.classes if keys >= ns.classes else 0
    result = Result(cached=cached, keys=keys, classes=classes, size=ns.size)
    cache, mount, log = folder / "cache", folder / "mnt", folder / "sidecar.log"
    capacity = max(64 << 20, 4 * keys * ns.size)  # never full: epoch 0 holds every seeded sample
    print(f"{label(cached)} cached of {label(keys)} keys: seeding {cache} ...", file=sys.stderr, flush=True)
    result.seed_s = seed(cache, Dataset(count=keys, size=ns.size, classes=classes), cached, capacity=capacity)
    result.seeded_index_bytes = index_bytes(cache)
    env = harness.s3_env()
    if ns.verify:
        result.verify = verify(cache, env)
    seeded = newest_sample(cache)
    print(f"{label(cached)}: measuring the sidecar ...", file=sys.stderr, flush=True)
    with endpoint(keys, classes, ns.size, ns.list_latency, folder / "s3.log") as url:
        port = harness.free_port()
        cmd = [*harness.EPOCHFS, "--log-level", "INFO", "sidecar", "--remote", REMOTE, "--seed", str(SEED),
               "--endpoint-url", url, "--cache", str(cache), "--mount", str(mount),
               "--health-port", str(port), "--capacity", str(capacity), "--min-samples", "1"]
        started = time.perf_counter()
        proc = harness.start(cmd, log=log, env=env)
        try:
            timeout = ns.timeout
            # Polled together, each timed from the start: none waits for another.
            first = first_times({
                "sample": lambda: newest_sample(cache) > seeded,
                "epoch": lambda: exists(mount / "epoch-0"),
                "ready": lambda: ready(port),
            }, proc, started=started, timeout=timeout, log=log)
            result.restart_sample_s, result.restart_epoch_s, result.restart_ready_s = (
                first["sample"], first["epoch"], first["ready"])
            result.rss_mb.update({f"{k}@ready": rss_mb(p) for k, p in pids(port, proc.pid).items()})
            result.python_start_s = timed_run([*harness.PYTHON, "-c", "pass"], env)
            result.status_s = timed_run([*harness.EPOCHFS, "status", "--cache", str(cache), "--json"], env)
            result.cut_cli_s = timed_run([*harness.EPOCHFS, "cut", "--cache", str(cache)], env)
            newest = newest_epoch(cache)
            lookup = time.perf_counter()
            os.stat(mount / f"epoch-{newest + 1}")  # the lookup cuts it (min-samples holds)
            result.lookup_cut_s = time.perf_counter() - lookup
            result.lookup_cut_made = newest_epoch(cache) == newest + 1
            fuse = pids(port, proc.pid).get("fuse")
            before = rss_mb(fuse)
            walked = time.perf_counter()
            result.scandir_files = walk(mount / f"epoch-{newest + 1}")
            result.scandir_s = time.perf_counter() - walked
            result.fuse_bytes_per_file = (rss_mb(fuse) - before) * (1 << 20) / max(1, result.scandir_files)
            result.rss_mb.update({f"{k}@end": rss_mb(p) for k, p in pids(port, proc.pid).items()})
        finally:
            harness.stop(proc, unmount=[mount])
        result.server = get_json(url + "/_stats")
    result.fetched = newest_sample(cache) - seeded
    result.index_bytes = index_bytes(cache)
    return result


COLUMNS = [
    ("cached", "samples", lambda r: label(r.cached)),
    ("keys", "keys", lambda r: label(r.keys)),
    ("restart: next sample", "s", lambda r: f"{r.restart_sample_s:.1f}"),
    ("restart: epoch-0", "s", lambda r: f"{r.restart_epoch_s:.1f}"),
    ("restart: ready", "s", lambda r: f"{r.restart_ready_s:.1f}"),
    ("status (CLI)", "s", lambda r: f"{r.status_s:.2f}"),
    ("cut (CLI)", "s", lambda r: f"{r.cut_cli_s:.2f}"),
    ("python start", "s", lambda r: f"{r.python_start_s:.2f}"),
    ("lookup cut", "s", lambda r: f"{r.lookup_cut_s:.3f}" + ("" if r.lookup_cut_made else " (not cut)")),
    ("scandir", "s", lambda r: f"{r.scandir_s:.1f} ({r.scandir_files} files)"),
    ("FUSE per file", "B", lambda r: f"{r.fuse_bytes_per_file:.0f}"),
    ("index", "MB", lambda r: f"{r.index_bytes / 1e6:.0f}"),
]
RSS = ("supervisor", "sampler", "fuse")


def markdown(results: list[Result]) -> str:
    head = [t if u in ("samples", "keys") else f"{t} ({u})" for t, u, _ in COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(fmt(r) for _, _, fmt in COLUMNS) + " |" for r in results]
    lines += ["", "| cached | " + " | ".join(f"{p} RSS ready / end (MB)" for p in RSS)
              + " | LIST pages | GETs | seeding (s) |", "|" + "---|" * (len(RSS) + 4)]
    for r in results:
        rss = [f"{r.rss_mb.get(p + '@ready', NAN):.0f} / {r.rss_mb.get(p + '@end', NAN):.0f}" for p in RSS]
        lines.append(f"| {label(r.cached)} | " + " | ".join(rss)
                     + f" | {r.server.get('list_pages', 0)} | {r.server.get('gets', 0)}"
                     f" | {sum(r.seed_s.values()):.0f} |")
    return "\n".join(lines)


KEPT = "epochfs-scale-cached"
"""The folder ``--keep`` makes in ``--dir`` and leaves there."""


@contextlib.contextmanager
def scratch(path: Path | None, keep: bool) -> Iterator[Path]:
    """:func:`harness.work_dir`, or with ``keep`` the folder :data:`KEPT` in ``path``, made afresh
    and left in place (mounts below it detached): only that folder of the run's own is ever
    removed, never ``--dir`` itself or anything else in it."""
    if not keep:
        with harness.work_dir(path, prefix="epochfs-cached-") as folder:
            yield folder
        return
    if path is None:
        harness.fail("--keep needs --dir")
    folder = path / KEPT
    if folder.exists():
        harness.unmount_below(folder)
        shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    try:
        yield folder
    finally:
        harness.unmount_below(folder)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m epochfs.benchmarks.scale_cached", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cached", default="10k", help="cached samples per run (default 10k; 100k seeds in "
                   "about a minute, 1M in about 10)")
    p.add_argument("--keys-per-cached", type=int, default=2,
                   help="keys in the remote per cached sample (2: the sampler keeps fetching)")
    p.add_argument("--keys", type=parse_count, default=0, help="keys in the remote (overrides the ratio)")
    p.add_argument("--size", type=int, default=256, help="bytes per object (256)")
    p.add_argument("--classes", type=int, default=100, help="class folders in the remote (100)")
    p.add_argument("--list-latency", type=float, default=0.02, help="seconds per listing page (0.02)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds any one wait may take")
    p.add_argument("--verify", action="store_true", help="run epochfs verify on each seeded cache")
    p.add_argument("--dir", type=Path, help=harness.DIR_HELP + " (default: the system's temp folder; "
                   "with --keep, a folder epochfs-scale-cached in it, kept for the next run)")
    p.add_argument("--keep", action="store_true", help="leave the scratch folder (needs --dir)")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--markdown", type=Path, help="write the tables here")
    p.add_argument("--plot", type=Path, help=harness.PLOT_HELP + ": each figure against the samples cached")
    ns = p.parse_args(argv)
    harness.require("boto3", "botocore", *(("matplotlib",) if ns.plot else ()))  # before minutes of work
    if not Path("/dev/fuse").exists() or os.geteuid() != 0:
        harness.fail("needs root and /dev/fuse (the sidecar mounts its FUSE view)")
    sizes = [parse_count(s) for s in ns.cached.split(",") if s.strip()]
    if ns.keys and any(n > ns.keys for n in sizes):
        harness.fail(f"--keys {ns.keys} is fewer than the samples to cache")
    results = []
    with scratch(ns.dir, ns.keep) as work:
        for n in sizes:
            folder = work / label(n)
            folder.mkdir()
            results.append(measure(n, ns, folder))
            if not ns.keep:
                shutil.rmtree(folder, ignore_errors=True)  # a 1M cache is GBs: gone before the next
    table = markdown(results)
    print(f"{ns.size} B objects, {ns.classes} class folders, a complete catalog, sidecar restarted on "
          "the seeded cache")
    print(table)
    harness.write_results(table, results, markdown=ns.markdown, json_path=ns.json)
    if ns.plot:
        from epochfs.benchmarks import _scale_cached_plot  # matplotlib only when a plot is asked for

        _scale_cached_plot.write(ns.plot, [asdict(r) for r in results])
    return 0


if __name__ == "__main__":
    harness.entry(main, "scale_cached")
