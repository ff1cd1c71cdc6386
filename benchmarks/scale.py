"""How epochfs's costs grow with the size of the remote: the real sidecar against a synthetic S3
endpoint (:mod:`epochfs.benchmarks.synthetic_s3`) of 10k, 100k, (1M, 10M) keys.

For each size, a fresh cache and mount, and the real ``epochfs sidecar`` (supervisor, sampler,
FUSE server) against the endpoint in its own process (ListObjectsV2 pages of 1,000 keys after
``--list-latency`` each, 20 ms like S3; ``--size`` byte objects, 16 KiB by default; class folders):

- **first sample**: from the sidecar's start until the index holds one sample;
- **epoch 0**: until ``stat epoch-0`` through the mount succeeds (a lookup asks for the cut);
- **RSS** of the supervisor, the sampler and the FUSE server (at epoch 0 and at the end);
- once ``--samples`` samples are cached: an explicit cut (``epochfs cut``, a process, beside the
  start-up of a bare ``python`` in the same run), a **lookup cut** (``stat epoch-N`` of a new N
  through the mount), ``epochfs status --json`` (a process), a **fresh epoch's scandir** (every
  folder of the new epoch walked once through the mount) and the FUSE server's RSS before and
  after it (bytes per file listed);
- **index** size on disk (``index.sqlite`` with its WAL);
- **restart**: SIGTERM, the same command on the same cache (with ``_scale_fetch.RESTART_ROOM``
  samples' worth more capacity: the first start may have filled its cache with samples no
  eviction may take), and the time to the next sample fetched (a new admission in the index), and
  to ``/readyz``. The capacity is kept below the remote's bytes (at most 3/4 of them), so that
  there are always keys left to fetch; the benchmark fails at once, saying why, where the restart
  would find nothing to fetch;
- the endpoint's counters: listing pages and GETs of the whole run;
- **fetching while the listing runs and after it** (:mod:`epochfs.benchmarks._scale_fetch`):
  samples admitted per second in a ``--fetch-window`` from epoch 0 while the listing runs, and in
  the restarted sidecar once its (resumed) listing is complete (the benchmark waits for that at
  the end), the catalog's keys per second in the first, the CPU of the sampler and the endpoint.

The baseline of each time is in the same row: the listing alone costs ``pages x latency`` at the
least (the ``list floor`` column). Output: a markdown table (``--markdown FILE`` too) and JSON
(``--json FILE``).

    epochfs bench scale                                   # 10k and 100k keys
    python -m epochfs.benchmarks.scale --sizes 10k,100k,1M --json scale.json --markdown scale.md
    python -m epochfs.benchmarks.scale --sizes 2000 --samples 200 --fetch-window 1   # a smoke run (seconds)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from epochfs.benchmarks import _scale_fetch as fetching
from epochfs.benchmarks import harness
from epochfs.benchmarks._sidecar_probes import (
    Index,
    exists,
    get_json,
    pids,
    ready,
    rss_mb,
    timed_run,
    walk,
)

SUFFIX = {"k": 1_000, "m": 1_000_000}


def parse_count(text: str) -> int:
    """``10k``, ``1M``, ``2500``."""
    text = text.strip().lower()
    return int(float(text[:-1]) * SUFFIX[text[-1]]) if text and text[-1] in SUFFIX else int(text)


def label(n: int) -> str:
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


@dataclass
class Result:
    keys: int
    classes: int
    size: int
    samples: int
    list_floor_s: float
    first_sample_s: float = float("nan")
    epoch0_s: float = float("nan")
    cut_cli_s: float = float("nan")
    python_start_s: float = float("nan")
    lookup_cut_s: float = float("nan")
    status_s: float = float("nan")
    scandir_s: float = float("nan")
    scandir_files: int = 0
    fuse_bytes_per_file: float = float("nan")
    index_bytes: int = 0
    restart_ready_s: float = float("nan")
    restart_sample_s: float = float("nan")
    while_listing: dict[str, float] = field(default_factory=dict)
    """The fetch window while the listing runs (:class:`_scale_fetch.Window` as a dict)."""
    after_listing: dict[str, float] = field(default_factory=dict)
    """The fetch window once the listing is complete."""
    rss_mb: dict[str, float] = field(default_factory=dict)
    """Resident MB per process (``supervisor``, ``sampler``, ``fuse``) at epoch 0 and at the end."""
    server: dict[str, int] = field(default_factory=dict)


def wait_for(what: str, check: Callable[[], bool], proc: subprocess.Popen[bytes], *, timeout: float,
             log: Path, interval: float = 0.02) -> float:
    """Seconds until ``check()`` holds (polled every ``interval``), failing if ``proc`` dies."""
    started = time.perf_counter()
    harness.wait_ready(proc, check, what=what, timeout=timeout, interval=interval, log=log)
    return time.perf_counter() - started


@contextlib.contextmanager
def endpoint(keys: int, classes: int, size: int, latency: float,
             log: Path) -> Iterator[tuple[str, int]]:
    port = harness.free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [*harness.PYTHON, "-m", "epochfs.benchmarks.synthetic_s3", "--keys", str(keys), "--classes",
           str(classes), "--size", str(size), "--port", str(port), "--list-latency", str(latency)]
    with harness.running(cmd, what="synthetic S3", ready=lambda: bool(get_json(url + "/_stats")),
                         log=log) as proc:
        yield url, proc.pid


def cache_capacity(keys: int, samples: int, size: int) -> int:
    """The first start's ``--capacity``: room for three times the ``samples`` the benchmark waits
    for (64 MiB at the least), but never more than 3/4 of the remote's bytes. A cache that holds
    the whole remote has fetched all of it before the restart (10k keys of 16 KiB, 156 MiB, in the
    234 MiB that 3 x 5,000 samples gave), and the restart then has nothing to fetch."""
    return min(max(64 << 20, 3 * samples * size), keys * size * 3 // 4)


def with_capacity(cmd: list[str], capacity: int) -> list[str]:
    """``cmd`` with its ``--capacity`` value replaced."""
    at = cmd.index("--capacity") + 1
    return [*cmd[:at], str(capacity), *cmd[at + 1:]]


def measure(keys: int, ns: argparse.Namespace, folder: Path) -> Result:
    classes = ns.classes if keys >= ns.classes else 0
    samples = min(ns.samples, keys // 2)
    pages = -(-keys // 1000)
    result = Result(keys=keys, classes=classes, size=ns.size, samples=samples,
                    list_floor_s=pages * ns.list_latency)
    cache, mount, log = folder / "cache", folder / "mnt", folder / "sidecar.log"
    env = harness.s3_env()
    with endpoint(keys, classes, ns.size, ns.list_latency, folder / "s3.log") as (url, s3_pid):
        port = harness.free_port()
        capacity = cache_capacity(keys, samples, ns.size)
        cmd = [*harness.EPOCHFS, "--log-level", "INFO", "sidecar", "--remote", "s3://bench",
               "--endpoint-url", url, "--cache", str(cache), "--mount", str(mount),
               "--health-port", str(port), "--capacity", str(capacity), "--min-samples", "1"]
        index = Index(cache)
        timeout = ns.timeout
        proc = harness.start(cmd, log=log, env=env)
        try:
            result.first_sample_s = wait_for("the first sample", lambda: index.newest_sample() > 0, proc,
                                             timeout=timeout, log=log)
            result.epoch0_s = result.first_sample_s + wait_for(
                "epoch-0 through the mount", lambda: exists(mount / "epoch-0"), proc, timeout=timeout,
                log=log)
            who = pids(port, proc.pid)
            result.rss_mb.update({f"{k}@epoch0": rss_mb(p) for k, p in who.items()})
            if ns.fetch_window > 0:
                result.while_listing = asdict(fetching.measure(
                    cache / "index.sqlite", ns.fetch_window, sampler=who.get("sampler"), endpoint=s3_pid,
                    while_listing=True))
            wait_for(f"{samples} samples", lambda: index.count() >= samples, proc, timeout=timeout, log=log,
                     interval=0.2)
            result.python_start_s = timed_run([*harness.PYTHON, "-c", "pass"], env)
            result.cut_cli_s = timed_run([*harness.EPOCHFS, "cut", "--cache", str(cache)], env)
            newest = max(int(p.name.split("-")[1]) for p in mount.iterdir() if p.name.startswith("epoch-"))
            started = time.perf_counter()
            os.stat(mount / f"epoch-{newest + 1}")  # the lookup cuts it (min-samples holds)
            result.lookup_cut_s = time.perf_counter() - started
            result.status_s = timed_run([*harness.EPOCHFS, "status", "--cache", str(cache), "--json"], env)
            fuse = pids(port, proc.pid).get("fuse")
            before = rss_mb(fuse)
            started = time.perf_counter()
            result.scandir_files = walk(mount / f"epoch-{newest + 1}")
            result.scandir_s = time.perf_counter() - started
            grown = rss_mb(fuse) - before
            result.fuse_bytes_per_file = grown * (1 << 20) / max(1, result.scandir_files)
            result.rss_mb.update({f"{k}@end": rss_mb(p) for k, p in pids(port, proc.pid).items()})
            result.index_bytes = sum(p.stat().st_size for p in cache.glob("index.sqlite*"))
            # Restart on the same cache: the time to the next sample fetched, with room for it.
            harness.stop(proc, unmount=[mount])
            index.close()
            newest_id = index.newest_sample()
            index.close()
            restarted = with_capacity(cmd, capacity + fetching.RESTART_ROOM * ns.size)
            why = fetching.nothing_to_fetch(cache / "index.sqlite", keys=keys, size=ns.size,
                                            capacity=capacity + fetching.RESTART_ROOM * ns.size)
            if why:
                harness.fail(f"{label(keys)} keys: the restart would have nothing to fetch: {why}")
            proc = harness.start(restarted, log=folder / "sidecar-restart.log", env=env)
            started = time.perf_counter()
            result.restart_sample_s = wait_for("a sample after the restart",
                                               lambda: index.newest_sample() > newest_id, proc,
                                               timeout=timeout, log=folder / "sidecar-restart.log")
            wait_for("/readyz after the restart", lambda: ready(port), proc, timeout=timeout,
                     log=folder / "sidecar-restart.log")
            result.restart_ready_s = time.perf_counter() - started
            if ns.fetch_window > 0:
                wait_for("the complete listing", lambda: fetching.listing_complete(cache / "index.sqlite"),
                         proc, timeout=timeout, log=folder / "sidecar-restart.log", interval=0.5)
                # Samples admitted after the last cut stay until the next one, so a cache filled
                # since the benchmark's cuts fetches nothing: the window runs in a third start
                # with room for it (the catalog complete, no listing).
                harness.stop(proc, unmount=[mount])
                index.close()
                newest_id = index.newest_sample()
                index.close()
                log = folder / "sidecar-after.log"
                roomy = with_capacity(cmd, capacity + fetching.RESTART_ROOM * ns.size + fetching.ROOM)
                proc = harness.start(roomy, log=log, env=env)
                wait_for("a sample with the complete catalog", lambda: index.newest_sample() > newest_id,
                         proc, timeout=timeout, log=log)
                result.after_listing = asdict(fetching.measure(
                    cache / "index.sqlite", ns.fetch_window, sampler=pids(port, proc.pid).get("sampler"),
                    endpoint=s3_pid, while_listing=False))
        finally:
            index.close()
            harness.stop(proc, unmount=[mount])
        result.server = get_json(url + "/_stats")
    return result


def _rate(window: dict[str, float], name: str) -> float:
    return window.get(name, float("nan"))


COLUMNS = [
    ("keys", "keys", lambda r: label(r.keys)),
    ("list floor", "s", lambda r: f"{r.list_floor_s:.2f}"),
    ("first sample", "s", lambda r: f"{r.first_sample_s:.1f}"),
    ("epoch 0", "s", lambda r: f"{r.epoch0_s:.1f}"),
    ("restart: next sample", "s", lambda r: f"{r.restart_sample_s:.1f}"),
    ("restart: ready", "s", lambda r: f"{r.restart_ready_s:.1f}"),
    ("index", "MB", lambda r: f"{r.index_bytes / 1e6:.1f}"),
    ("cut (CLI)", "s", lambda r: f"{r.cut_cli_s:.2f}"),
    ("lookup cut", "s", lambda r: f"{r.lookup_cut_s:.3f}"),
    ("status (CLI)", "s", lambda r: f"{r.status_s:.2f}"),
    ("python start", "s", lambda r: f"{r.python_start_s:.2f}"),
    ("scandir", "s", lambda r: f"{r.scandir_s:.3f} ({r.scandir_files} files)"),
    ("FUSE per file", "B", lambda r: f"{r.fuse_bytes_per_file:.0f}"),
    ("fetch while listing", "/s", lambda r: f"{_rate(r.while_listing, 'samples_per_s'):.0f}"),
    ("fetch after listing", "/s", lambda r: f"{_rate(r.after_listing, 'samples_per_s'):.0f}"),
    ("listing", "keys/s", lambda r: f"{_rate(r.while_listing, 'keys_per_s'):.0f}"),
]
RSS = ("supervisor", "sampler", "fuse")


def markdown(results: list[Result]) -> str:
    head = [f"{t} ({u})" if u != "keys" else t for t, u, _ in COLUMNS]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(fmt(r) for _, _, fmt in COLUMNS) + " |" for r in results]
    lines += ["", "| keys | " + " | ".join(f"{p} RSS at epoch 0 / end (MB)" for p in RSS)
              + " | LIST pages | GETs | sampler / endpoint CPU while listing (cores) | after |",
              "|" + "---|" * (len(RSS) + 5)]
    for r in results:
        nan = float("nan")
        rss = [f"{r.rss_mb.get(p + '@epoch0', nan):.0f} / {r.rss_mb.get(p + '@end', nan):.0f}" for p in RSS]
        cpu = [f"{_rate(w, 'sampler_cpu'):.2f} / {_rate(w, 'endpoint_cpu'):.2f}"
               for w in (r.while_listing, r.after_listing)]
        lines.append(f"| {label(r.keys)} | " + " | ".join(rss)
                     + f" | {r.server.get('list_pages', 0)} | {r.server.get('gets', 0)} | "
                     + " | ".join(cpu) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m epochfs.benchmarks.scale", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="10k,100k", help="remote sizes in keys (default 10k,100k; 1M and 10M "
                   "take about 2 and 20 minutes of listing each)")
    p.add_argument("--samples", type=int, default=5000,
                   help="samples cached before the cut, status and scandir (at most half the keys)")
    p.add_argument("--size", type=int, default=16 * 1024, help="bytes per object (16384)")
    p.add_argument("--classes", type=int, default=100, help="class folders in the remote (100)")
    p.add_argument("--list-latency", type=float, default=0.02, help="seconds per listing page (0.02)")
    p.add_argument("--fetch-window", type=float, default=10.0,
                   help="seconds of each fetch window, while the listing runs and after it (10; 0: "
                   "neither, and no wait for the complete listing after the restart)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds any one wait may take")
    p.add_argument("--dir", type=Path, help=harness.DIR_HELP + " (default: the system's temp folder)")
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--markdown", type=Path, help="write the tables here")
    p.add_argument("--plot", type=Path, help=harness.PLOT_HELP + ": each figure against the keys")
    ns = p.parse_args(argv)
    harness.require("boto3", "botocore")
    if not Path("/dev/fuse").exists() or os.geteuid() != 0:
        harness.fail("needs root and /dev/fuse (the sidecar mounts its FUSE view)")
    results = []
    for size in [parse_count(s) for s in ns.sizes.split(",") if s.strip()]:
        with harness.work_dir(ns.dir / label(size) if ns.dir else None) as folder:
            print(f"{label(size)} keys ...", file=sys.stderr, flush=True)
            results.append(measure(size, ns, folder))
    table = markdown(results)
    print(f"{ns.size} B objects, {ns.classes} class folders, "
          f"{ns.list_latency * 1000:.0f} ms per listing page")
    print(table)
    harness.write_results(table, results, markdown=ns.markdown, json_path=ns.json, plot=ns.plot, kind="scale")
    return 0


if __name__ == "__main__":
    harness.entry(main, "scale")
