"""Sampler fetch throughput versus s5cmd and rclone on the same local S3 server, in one run.

Starts a moto S3 server on 127.0.0.1 (or uses ``--endpoint``), uploads datasets of large
objects (4 MiB by default) and small ones (64 KiB), each twice (``--checksums``): the modern way,
with a CRC64NVME full-object checksum stored (what S3 stores for every new object by default, and
what boto3 sends when asked), and md5-only (no stored checksum, a plain md5 ETag, what older
uploads left), then downloads each dataset with:

* ``epochfs sample`` (the real command: listing, sampling order, reservations, one checksum while
  streaming (the stored CRC64NVME, or md5 for an md5-only object), fsync, atomic admission), timed
  from process start until the index lists every object; the run is checked to have verified
  every object by the expected kind;
* ``s5cmd cp 's3://bucket/prefix/*' DIR`` (``--numworkers`` workers, its default 256);
* ``rclone copy`` with ``--transfers`` and ``--checkers`` set to the same concurrency as the sampler;
* ``download-path`` (only when ``--tools`` names it): epochfs's download path alone in a fresh
  Python process (:mod:`._fetch_alone`: the imports a download needs, one LIST, the sampler's
  downloader on the same concurrency, each object verified and fsynced; no sampler around it),
  timed from its process start to its exit: the most ``epochfs sample`` could reach end to end;
* ``python-floor`` (only when ``--tools`` names it): the least a Python process does for a durable,
  checked fetch (:mod:`._fetch_floor`: the standard library's HTTP client, the sampler's presigned
  GET and CRC functions, direct writes and an fsync per object; no epochfs package imported), timed
  the same way: what any Python sampler is up against on the store and machine of the run.

Each tool runs ``--repeat`` times per dataset (5 by default), in rotating order, into a fresh
folder on the same disk; every median is shown with its spread (``median [min-max]``), and the
ratios of the sampler to each baseline with the range of the ratios of runs made back to back,
per stored checksum: never the best run alone. The server logs the time each request arrives
(:class:`~.harness.RequestLog`, the machine's monotonic clock), so each tool's start-up is
measured where it ends: from its process start to its first GET (a listing page) and to its
first object GET; the ratio "after start-up" is every tool's run from its own first object GET to
its end (the same cut for each side). After each run a timed ``sync`` writes back what the tool
left in the page cache (s5cmd and rclone do not fsync; the sampler fsyncs every object), reported
beside it. The CPU seconds the moto server used during each run are reported too: moto is one
Python process, and when it uses about one core for the whole run it, not the client, is the
bottleneck, which caps every tool at the same rate. The CPU each tool's own process used (start-up and exit
included) is reported beside it. ``--pin STORE:TOOLS`` runs moto on some CPUs and every tool on the
others (:mod:`._cpu_pin`), so that no tool's CPU competes with the store's, as with a remote store.

    epochfs bench fetch                                         # defaults: 160 x 4 MiB, 1500 x 64 KiB
    python -m epochfs.benchmarks.fetch --tools epochfs,s5cmd --checksums crc64nvme --json out.json
    python -m epochfs.benchmarks.fetch --sample-args "--list-process 0"  # epochfs sample's own flags
    python -m epochfs.benchmarks.fetch --baseline-src /tmp/old/src   # before/after, alternating
    python -m epochfs.benchmarks.fetch --tools epochfs,s5cmd,download-path --small 0  # the ceiling
    python -m epochfs.benchmarks.fetch --tools epochfs,s5cmd,python-floor  # Python's floor
    python -m epochfs.benchmarks.fetch --tools epochfs,s5cmd --pin 0:1  # moto on CPU 0, the tools on 1

``--baseline-src`` adds the tool ``epochfs-base``: the same ``epochfs sample`` with that source
folder first on ``PYTHONPATH`` (a worktree of an older commit), run in turn with the others, so a
change is measured against the code before it under the same load. Before the runs, both trees'
modules are compiled to bytecode (``compileall``, into their ``__pycache__``), as ``pip install``
compiles an installed package: where ``PYTHONDONTWRITEBYTECODE`` is set (this development
environment) every start would otherwise compile ~80 modules from source (~0.2 s of CPU), a cost
no deployment pays.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import os
import shlex
import shutil
import statistics
import subprocess
import time
from dataclasses import asdict
from functools import partial
from pathlib import Path

from epochfs.benchmarks import harness
from epochfs.benchmarks._cpu_pin import pin_split, pinned
from epochfs.benchmarks._fetch_report import Run, print_summary, share
from epochfs.benchmarks._fetch_runs import (
    NOT_PROGRAMS,
    PROGRAM,
    SAMPLE_ARGS,
    STEADY,
    TOOLS,
    compile_epochfs,
    run_epochfs,
    verified_kinds,
)

CHECKSUMS = {"crc64nvme": "crc64nvme", "crc32": "crc32", "md5": "etag-md5"}
"""How objects are uploaded (the checksum S3 stores for them) -> the kind the sampler must record."""


def upload(endpoint: str, bucket: str, prefix: str, count: int, size: int, checksum: str, *,
           threads: int = 8) -> int:
    """Upload ``count`` objects of ``size`` bytes under ``prefix`` with S3 storing ``checksum``:
    ``crc64nvme``/``crc32`` (boto3 computes it and S3 stores it, as modern uploads do) or ``md5``
    (no checksum sent, so S3 stores none and the ETag, a plain md5, is all that can verify)."""
    harness.require("boto3")
    import boto3
    from botocore.config import Config

    seed = os.urandom(size + count)
    when = "when_required" if checksum == "md5" else "when_supported"
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                          aws_access_key_id=harness.CREDENTIALS["AWS_ACCESS_KEY_ID"],
                          aws_secret_access_key=harness.CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                          config=Config(request_checksum_calculation=when))
    exists = (client.exceptions.BucketAlreadyOwnedByYou, client.exceptions.BucketAlreadyExists)
    with contextlib.suppress(*exists):
        client.create_bucket(Bucket=bucket)
    extra = {} if checksum == "md5" else {"ChecksumAlgorithm": checksum.upper()}

    def put(i: int) -> int:
        body = seed[i:i + size]
        client.put_object(Bucket=bucket, Key=f"{prefix}/{i:06d}.bin", Body=body, **extra)
        return len(body)

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        return sum(pool.map(put, range(count)))


def _seconds(value: float | None) -> str:
    return "    -" if value is None else f"{value:5.3f}s"


def download_alone(endpoint: str, url: str, dest: Path, concurrency: int) -> tuple[float, float, int]:
    """The sampler's download path in this process (the real :class:`Downloader` and S3 remote, no
    sampler around them): (wall seconds, CPU seconds of this process, objects) for every object
    under ``url``, fetched on ``concurrency`` threads. The CPU is what the client spends per
    object, without start-up and with the machine's other load left out of the count; the wall
    time is a floor for ``epochfs sample``'s end to end on this store and machine: the same
    downloads, fsyncs included, without the interpreter's start, the listing, the fetch order
    and the admissions."""
    import threading

    from epochfs.sidecar.download import Downloader, RetryPolicy
    from epochfs.sidecar.remote.s3 import S3Remote
    from epochfs.sidecar.store import Candidate, Store

    for name, value in harness.s3_env().items():
        os.environ.setdefault(name, value)
    remote = S3Remote(url=url, endpoint_url=endpoint, concurrency=concurrency)
    store = Store(dest, create=True)
    try:
        cands = [Candidate(str(o.key), f"{i:032x}", o.size, o.version) for i, o in enumerate(remote.list())]
        downloader = Downloader(store=store, remote=remote, retry=RetryPolicy(attempts=1),
                                stop=threading.Event())
        cpu0, wall0 = time.process_time(), time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
            results = list(pool.map(downloader.fetch, cands))
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        failed = [r.error for r in results if r.admission is None]
        if failed:
            raise RuntimeError(f"{len(failed)} downloads failed: {failed[:3]}")
        for r in results:
            assert r.admission is not None
            r.admission.temp.unlink()
        return wall, cpu, len(cands)
    finally:
        store.close()
        remote.close()


def first_gets(requests: Path, started: float) -> tuple[float | None, float | None]:
    """Seconds from ``started`` (a tool's process start) to the first GET the server received
    after it (a listing page: a HEAD before it does not count) and to the first object GET (the
    datasets' keys end in ``.bin``); None where the log has none."""
    gets = [(t, path) for t, method, path in harness.logged_requests(requests, started) if method == "GET"]
    first = gets[0][0] - started if gets else None
    objects = [t for t, path in gets if path.endswith(".bin")]
    return first, (objects[0] - started if objects else None)


spread = harness.spread
"""``median [min-max]``: the harness's one definition, under the name this module's callers use."""


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


def tool_list(text: str, *, baseline: bool) -> list[str]:
    """The tools of ``--tools``, in order, each once (a tool named twice would pair its runs with
    the wrong ones); with ``--baseline-src``, ``epochfs-base`` once, right after ``epochfs``,
    whether ``--tools`` names it or not."""
    tools = list(dict.fromkeys(t for t in text.split(",") if t))
    if baseline and "epochfs-base" not in tools:
        tools.insert(tools.index("epochfs") + 1 if "epochfs" in tools else 0, "epochfs-base")
    return tools


def _cpus(cpus: set[int]) -> str:
    return ",".join(str(c) for c in sorted(cpus))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--large", type=int, default=160, help="number of large objects (0: none)")
    ap.add_argument("--large-size", type=int, default=4 << 20, help="bytes per large object")
    ap.add_argument("--small", type=int, default=1500, help="number of small objects (0: none)")
    ap.add_argument("--small-size", type=int, default=64 << 10, help="bytes per small object")
    ap.add_argument("--checksums", default="crc64nvme,md5",
                    help=f"what S3 stores for each dataset's objects, one upload each "
                         f"({', '.join(CHECKSUMS)})")
    ap.add_argument("--concurrency", type=int, default=32, help="epochfs --concurrency, rclone --transfers")
    ap.add_argument("--repeat", type=int, default=5,
                    help="alternating runs per tool and dataset (median and spread reported)")
    ap.add_argument("--dir", type=Path, default=None, help="scratch folder (default: a temp dir)")
    ap.add_argument("--endpoint", default=None, help="use this S3 endpoint instead of starting moto")
    ap.add_argument("--tools", default="epochfs,s5cmd,rclone")
    ap.add_argument("--json", type=Path, default=None, help="write all runs here")
    ap.add_argument("--plot", type=Path, help=harness.PLOT_HELP + ": epochfs's ratio to each tool")
    ap.add_argument("--sample-args", default="", help="more arguments of epochfs sample, one string "
                    "(\"--list-process 0\")")
    ap.add_argument("--baseline-src", type=Path, default=None,
                    help="also run epochfs sample from this source folder (PYTHONPATH; e.g. a git "
                         "worktree's src/) as the tool epochfs-base, alternating with the others")
    ap.add_argument("--pin", default=None, metavar="STORE:TOOLS",
                    help="CPUs for moto and for the tools (this benchmark's main thread starts them), "
                         "e.g. 0:1: the store then shares no core with the tools it serves, as a remote "
                         "store does not (default: no pinning; benchmarks/_cpu_pin.py says why)")
    args = ap.parse_args(argv)
    SAMPLE_ARGS[:] = shlex.split(args.sample_args)
    pin = None
    if args.pin is not None:
        if args.endpoint:
            ap.error("--pin: only for the moto this benchmark starts (not with --endpoint)")
        try:
            pin = pin_split(args.pin)
        except ValueError as e:
            ap.error(f"--pin: {e}")

    tools = tool_list(args.tools, baseline=args.baseline_src is not None)
    if args.baseline_src is not None:
        if not (args.baseline_src / "epochfs" / "sidecar" / "cli.py").exists():
            ap.error(f"--baseline-src: no epochfs/sidecar/cli.py under {args.baseline_src}")
        TOOLS["epochfs-base"] = partial(run_epochfs, src=args.baseline_src.resolve())
    unknown = sorted(set(tools) - set(TOOLS))
    if unknown:
        ap.error(f"--tools: unknown {', '.join(unknown)} (known: {', '.join(TOOLS)})")
    checksums = [c for c in args.checksums.split(",") if c]
    unknown = sorted(set(checksums) - set(CHECKSUMS))
    if unknown or not checksums:
        ap.error(f"--checksums: unknown {', '.join(unknown) or 'none given'} (known: {', '.join(CHECKSUMS)})")
    PROGRAM.update({tool: harness.program(tool) for tool in tools if tool not in NOT_PROGRAMS})
    if "epochfs-base" in tools:
        PROGRAM["epochfs"] = harness.program("epochfs")
        compile_epochfs(args.baseline_src)
    if "epochfs" in tools:
        compile_epochfs()
    with contextlib.ExitStack() as stack:
        scratch = stack.enter_context(harness.work_dir(prefix="epochfs-fetch-", parent=args.dir))
        requests = scratch / "requests.log"
        moto = None if args.endpoint else stack.enter_context(
            harness.moto_server(scratch / "moto.log", requests=requests))
        endpoint = moto.endpoint if moto is not None else args.endpoint
        moto_pid = moto.proc.pid if moto is not None else None
        if pin is not None and moto_pid is not None:
            stack.enter_context(pinned(moto_pid, *pin))  # the tools this process starts inherit it
            print(f"moto on CPU(s) {_cpus(pin[0])}, this benchmark and the tools on {_cpus(pin[1])} (--pin)")
        sizes = {"large": (args.large, args.large_size), "small": (args.small, args.small_size)}
        datasets = [(name, checksum) for name, (count, _) in sizes.items() if count for checksum in checksums]
        for name, checksum in datasets:
            count, size = sizes[name]
            upload(endpoint, "bench", f"{name}-{checksum}", count, size, checksum)
        runs: list[Run] = []
        for name, checksum in datasets:
            count, size = sizes[name]
            url = f"s3://bench/{name}-{checksum}"
            for rep in range(args.repeat):
                order = tools[rep % len(tools):] + tools[: rep % len(tools)]
                for tool in order:
                    dest = scratch / f"{tool}-{name}-{checksum}-{rep}"
                    subprocess.run(["sync"], check=False)
                    cpu0 = harness.cpu_seconds(moto_pid)
                    client0 = harness.children_cpu()
                    started, seconds = TOOLS[tool](endpoint, url, dest, count, args.concurrency)
                    cpu = harness.cpu_seconds(moto_pid) - cpu0
                    client = harness.children_cpu() - client0
                    synced = time.monotonic()
                    subprocess.run(["sync"], check=False)
                    synced = time.monotonic() - synced
                    first, first_object = first_gets(requests, started)
                    by_sampler = tool.startswith("epochfs")
                    n, total = files_in(dest / "objects" if by_sampler else dest)
                    if n != count or total != count * size:
                        raise RuntimeError(f"{tool} fetched {n} files / {total} bytes of {name}-{checksum}")
                    if by_sampler and verified_kinds(dest) != {CHECKSUMS[checksum]}:
                        raise RuntimeError(f"{name}-{checksum}: the sampler verified by "
                                           f"{sorted(verified_kinds(dest))}, not {CHECKSUMS[checksum]}")
                    steady = STEADY.pop("last", None) if by_sampler else None
                    after = None if first_object is None else seconds - first_object
                    runs.append(Run(tool, name, checksum, count, total, seconds, cpu, steady, client,
                                    first, first_object, after, synced))
                    print(f"  {name:5s} {checksum:9s} {tool:8s} run {rep}: {seconds:6.2f}s  "
                          f"{harness.mb_per_s(total, seconds):7.1f} MB/s  {count / seconds:7.0f} obj/s  "
                          f"first GET {_seconds(first)}  first object GET {_seconds(first_object)}  "
                          f"then sync {synced:5.2f}s  moto CPU {share(cpu / seconds):>4s} of a core  "
                          f"client CPU {client:5.2f}s"
                          + (f"  (from its first object GET: {after:.2f}s)" if after is not None else ""),
                          flush=True)
                    shutil.rmtree(dest, ignore_errors=True)
        alone: dict[tuple[str, str], list[float]] = {}
        if "epochfs" in tools:
            print()
            for name, checksum in datasets:
                per, walls = [], alone.setdefault((name, checksum), [])
                for rep in range(args.repeat):
                    folder = scratch / f"inproc-{name}-{checksum}-{rep}"
                    subprocess.run(["sync"], check=False)
                    wall, cpu, n = download_alone(endpoint, f"s3://bench/{name}-{checksum}", folder,
                                                  args.concurrency)
                    walls.append(wall)
                    per.append(cpu / n)
                    shutil.rmtree(folder, ignore_errors=True)
                print(f"{name} ({checksum}): the download path alone, in process: {spread(walls)} s, "
                      f"client CPU per object {statistics.median(per) * 1e3:.2f} ms (median of {len(per)}: "
                      f"{', '.join(f'{c * 1e3:.2f}' for c in per)})", flush=True)
        print_summary(runs, datasets, tools, alone, args.repeat)
        if args.json:
            args.json.write_text(json.dumps([asdict(r) for r in runs], indent=2))
        harness.write_plot(args.plot, "fetch", [asdict(r) for r in runs])
        return 0


if __name__ == "__main__":
    harness.entry(main, "fetch")
