"""Sampler fetch throughput versus s5cmd and rclone on the same local S3 server, in one run.

Starts a moto S3 server on 127.0.0.1 (or uses ``--endpoint``), uploads two datasets (large
objects, 4 MiB by default, and small ones, 64 KiB), then downloads each dataset with:

* ``epochfs sample`` (the real command: listing, sampling order, reservations, md5 while
  streaming, fsync, atomic admission), timed from process start until the index lists every object;
* ``s5cmd cp 's3://bucket/prefix/*' DIR`` (``--numworkers`` workers, its default 256);
* ``rclone copy`` with ``--transfers`` and ``--checkers`` set to the same concurrency as the sampler.

Each tool runs ``--repeat`` times per dataset, in rotating order, into a fresh folder on the same
disk; medians are reported with bytes/s (large) or objects/s (small) and ratios of the sampler to
each baseline. The CPU seconds the moto server used during each run are reported too: moto is one
Python process, and when it uses about one core for the whole run it, not the client, is the
bottleneck, which caps every tool at the same rate. The CPU each tool's own process used (start-up
and exit included) is reported beside it.

    .venv/bin/python benchmarks/fetch.py                       # defaults: 96 x 4 MiB, 3000 x 64 KiB
    .venv/bin/python benchmarks/fetch.py --large 96 --small 3000 --repeat 3 --json out.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import resource
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

VENV_BIN = Path(sys.executable).parent
EPOCHFS = str(VENV_BIN / "epochfs")
S5CMD = shutil.which("s5cmd", path=str(VENV_BIN)) or shutil.which("s5cmd") or "s5cmd"
RCLONE = shutil.which("rclone") or "/usr/bin/rclone"
CREDS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


def base_env() -> dict[str, str]:
    """The environment for every tool: test credentials, no custom CA bundle (plain http here;
    rclone refuses AWS_CA_BUNDLE with its own transport)."""
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    env.update(CREDS)
    return env


@dataclass
class Run:
    tool: str
    dataset: str
    objects: int
    bytes: int
    seconds: float
    server_cpu_seconds: float
    steady_seconds: float | None = None
    """epochfs only: from the catalog being ready to the last sample (start-up excluded)."""
    client_cpu_seconds: float = float("nan")
    """CPU (user + system) of the tool's process for the whole run, start-up and exit included."""

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6

    @property
    def objects_per_s(self) -> float:
        return self.objects / self.seconds


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int | None) -> float:
    """utime + stime of a process (and its reaped children), from /proc."""
    if pid is None:
        return float("nan")
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(x) for x in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    """User + system CPU seconds of this process's terminated and waited-for children."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def start_moto(port: int, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1).read()
            return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"moto exited: {log.read_text()[-2000:]}") from None
            time.sleep(0.1)  # start-up poll of a port, not synchronization of the measurement
    raise RuntimeError("moto did not start")


def upload(endpoint: str, bucket: str, prefix: str, count: int, size: int) -> int:
    import boto3

    client = boto3.client("s3", endpoint_url=endpoint, **{
        "aws_access_key_id": CREDS["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": CREDS["AWS_SECRET_ACCESS_KEY"], "region_name": "us-east-1"})
    if bucket not in [b["Name"] for b in client.list_buckets().get("Buckets", [])]:
        client.create_bucket(Bucket=bucket)
    seed = os.urandom(size + count)

    def put(i: int) -> None:
        client.put_object(Bucket=bucket, Key=f"{prefix}/{i:06d}.bin", Body=seed[i:i + size])

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(put, range(count)))
    return count * size


class IndexWatch:
    """Read-only polls of a cache index: catalog ready, samples admitted (one connection)."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self.db: sqlite3.Connection | None = None

    def _query(self, sql: str) -> object:
        if self.db is None:
            if not (self.cache / "index.sqlite").exists():
                return None
            self.db = sqlite3.connect(f"file:{self.cache / 'index.sqlite'}?mode=ro", uri=True, timeout=5)
        try:
            row = self.db.execute(sql).fetchone()
        except sqlite3.OperationalError:
            return None
        return None if row is None else row[0]

    def catalog_ready(self) -> bool:
        return self._query("SELECT value FROM meta WHERE name='catalog_objects'") is not None

    def samples(self) -> int:
        return int(self._query("SELECT COUNT(*) FROM samples") or 0)

    def close(self) -> None:
        if self.db is not None:
            self.db.close()


STEADY: dict[str, float] = {}
"""Seconds of the last epochfs run after its start-up (imports, client, listing)."""


def run_epochfs(endpoint: str, url: str, dest: Path, count: int, concurrency: int) -> float:
    env = {**base_env(), "EPOCHFS_PROGRESS_SECONDS": "3600"}
    started = time.monotonic()
    proc = subprocess.Popen(
        [EPOCHFS, "--log-level", "WARNING", "sample", "--remote", url, "--cache", str(dest),
         "--endpoint-url", endpoint, "--capacity", "1Ti", "--concurrency", str(concurrency)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    watch = IndexWatch(dest)
    ready: float | None = None
    try:
        while True:
            if ready is None and watch.catalog_ready():
                ready = time.monotonic()
            if ready is not None and watch.samples() >= count:
                break
            if proc.poll() is not None:
                raise RuntimeError(f"epochfs sample exited {proc.returncode}: {proc.stderr.read()!r}")
            time.sleep(0.01)  # completion poll: 10 ms resolution on runs of seconds
        done = time.monotonic()
        STEADY["last"] = done - ready
        return done - started
    finally:
        watch.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def run_s5cmd(endpoint: str, url: str, dest: Path, count: int, concurrency: int) -> float:
    env = base_env()
    started = time.monotonic()
    subprocess.run([S5CMD, "--endpoint-url", endpoint, "cp", f"{url}/*", f"{dest}/"], env=env,
                   check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - started


def run_rclone(endpoint: str, url: str, dest: Path, count: int, concurrency: int) -> float:
    env = {**base_env(), "RCLONE_CONFIG_BENCH_TYPE": "s3", "RCLONE_CONFIG_BENCH_PROVIDER": "Other",
           "RCLONE_CONFIG_BENCH_ENDPOINT": endpoint,
           "RCLONE_CONFIG_BENCH_ACCESS_KEY_ID": CREDS["AWS_ACCESS_KEY_ID"],
           "RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY": CREDS["AWS_SECRET_ACCESS_KEY"],
           "RCLONE_CONFIG_BENCH_REGION": "us-east-1", "RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE": "true"}
    src = "bench:" + url.removeprefix("s3://")
    started = time.monotonic()
    subprocess.run([RCLONE, "copy", src, str(dest), "--transfers", str(concurrency), "--checkers",
                    str(concurrency), "--config", "/dev/null"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - started


TOOLS = {"epochfs": run_epochfs, "s5cmd": run_s5cmd, "rclone": run_rclone}


def files_in(dest: Path) -> tuple[int, int]:
    n = total = 0
    for root, _dirs, files in os.walk(dest):
        if "tmp" in Path(root).parts[-1:]:
            continue
        for name in files:
            if name.startswith("index.sqlite"):
                continue
            n += 1
            total += os.path.getsize(os.path.join(root, name))
    return n, total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--large", type=int, default=96, help="number of large objects")
    ap.add_argument("--large-size", type=int, default=4 << 20, help="bytes per large object")
    ap.add_argument("--small", type=int, default=3000, help="number of small objects")
    ap.add_argument("--small-size", type=int, default=64 << 10, help="bytes per small object")
    ap.add_argument("--concurrency", type=int, default=32, help="epochfs --concurrency, rclone --transfers")
    ap.add_argument("--repeat", type=int, default=3, help="runs per tool and dataset (median reported)")
    ap.add_argument("--dir", type=Path, default=None, help="scratch folder (default: a temp dir)")
    ap.add_argument("--endpoint", default=None, help="use this S3 endpoint instead of starting moto")
    ap.add_argument("--tools", default="epochfs,s5cmd,rclone")
    ap.add_argument("--json", type=Path, default=None, help="write all runs here")
    args = ap.parse_args(argv)

    scratch = Path(tempfile.mkdtemp(prefix="epochfs-fetch-", dir=args.dir))
    moto: subprocess.Popen[bytes] | None = None
    try:
        if args.endpoint:
            endpoint = args.endpoint
        else:
            port = free_port()
            moto = start_moto(port, scratch / "moto.log")
            endpoint = f"http://127.0.0.1:{port}"
        datasets = {
            "large": (args.large, args.large_size),
            "small": (args.small, args.small_size),
        }
        for name, (count, size) in datasets.items():
            upload(endpoint, "bench", name, count, size)
        tools = [t for t in args.tools.split(",") if t]
        runs: list[Run] = []
        for name, (count, size) in datasets.items():
            url = f"s3://bench/{name}"
            for rep in range(args.repeat):
                order = tools[rep % len(tools):] + tools[: rep % len(tools)]
                for tool in order:
                    dest = scratch / f"{tool}-{name}-{rep}"
                    subprocess.run(["sync"], check=False)
                    cpu0 = cpu_seconds(moto.pid if moto else None)
                    client0 = children_cpu()
                    seconds = TOOLS[tool](endpoint, url, dest, count, args.concurrency)
                    cpu = cpu_seconds(moto.pid if moto else None) - cpu0
                    client = children_cpu() - client0
                    n, total = files_in(dest / "objects" if tool == "epochfs" else dest)
                    if n != count or total != count * size:
                        raise RuntimeError(f"{tool} fetched {n} files / {total} bytes of {name}")
                    steady = STEADY.pop("last", None) if tool == "epochfs" else None
                    runs.append(Run(tool, name, count, total, seconds, cpu, steady, client))
                    print(f"  {name:5s} {tool:8s} run {rep}: {seconds:6.2f}s  "
                          f"{total / seconds / 1e6:7.1f} MB/s  {count / seconds:7.0f} obj/s  "
                          f"moto CPU {cpu / seconds:4.0%} of a core  client CPU {client:5.2f}s"
                          + (f"  (after start-up: {steady:.2f}s)" if steady else ""), flush=True)
                    shutil.rmtree(dest, ignore_errors=True)
        print()
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        print(f"{'dataset':8s} {'tool':8s} {'median s':>9s} {'MB/s':>8s} {'obj/s':>8s} {'moto CPU':>9s} "
              f"{'client CPU s':>13s}")
        medians: dict[tuple[str, str], Run] = {}
        for name in datasets:
            for tool in tools:
                mine = [r for r in runs if r.tool == tool and r.dataset == name]
                secs = statistics.median(r.seconds for r in mine)
                cpu = statistics.median(r.server_cpu_seconds / r.seconds for r in mine)
                client = statistics.median(r.client_cpu_seconds for r in mine)
                med = Run(tool, name, mine[0].objects, mine[0].bytes, secs, cpu * secs)
                medians[(name, tool)] = med
                print(f"{name:8s} {tool:8s} {secs:9.2f} {med.mb_per_s:8.1f} {med.objects_per_s:8.0f} "
                      f"{cpu:9.0%} {client:13.2f}")
        print()
        if "epochfs" in tools:
            for name, unit in (("large", "bytes/s"), ("small", "objects/s")):
                mine = medians[(name, "epochfs")]
                steady = statistics.median(
                    r.steady_seconds for r in runs
                    if r.tool == "epochfs" and r.dataset == name and r.steady_seconds
                )
                for base in tools:
                    if base == "epochfs":
                        continue
                    ratio = medians[(name, base)].seconds / mine.seconds
                    print(f"{name} ({unit}): epochfs / {base} = {ratio:.2f}x end to end, "
                          f"{medians[(name, base)].seconds / steady:.2f}x after the sampler's start-up "
                          f"({mine.seconds - steady:.2f}s)")
        if args.json:
            args.json.write_text(json.dumps([asdict(r) for r in runs], indent=2))
        return 0
    finally:
        if moto is not None:
            moto.terminate()
            moto.wait(timeout=30)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
