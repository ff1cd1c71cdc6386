"""Read throughput through the epochfs mount versus direct reads of the cache folder (one run).

Same files on the node volume, read three ways, with 1 and N reader processes, per file size:

* ``direct``: the object files in ``<cache>/objects`` (the baseline), page cache cold, then warm;
* ``mount first``: a freshly cut epoch, never seen by the kernel, listed and read through the
  mount (every entry and symlink target is new to the kernel), with data cold and with data warm;
* ``mount repeat``: the same epoch again (entries, attributes and symlink targets cached).

Cold phases drop the page cache first (``echo 3 > /proc/sys/vm/drop_caches``, root only); with
``--no-drop`` every phase is warm and the report says so. Ratios compare like with like: mount
first (cold) / direct cold, mount first (warm) / direct warm, mount repeat / direct warm.

    sudo .venv/bin/python benchmarks/mount.py --dir /var/tmp/epochfs-bench

The mount server's Python call counts are printed too (from its shutdown log line): the design
aims for one readlink per file on a first read and none on a repeat.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from epochfs.fuse.mounting import find_mount, lazy_unmount, wait_for_mount  # noqa: E402
from fuse_helpers import admit, make_objects, open_store  # noqa: E402

BUF = bytearray(8 << 20)


def _read_files(paths: list[str]) -> int:
    """Read each file to the end into a reused buffer; returns bytes read."""
    total = 0
    view = memoryview(BUF)
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            while True:
                n = os.readv(fd, [view])
                if n <= 0:
                    break
                total += n
        finally:
            os.close(fd)
    return total


PHASES = ("direct_cold", "direct_warm", "mount_first_cold", "mount_first_warm", "mount_repeat")


def mbps(dt: float, total: int) -> float:
    return total / dt / 1e6


def drop_caches(enabled: bool) -> None:
    if not enabled:
        return
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def timed_read(pool: mp.pool.Pool, procs: int, paths: list[str]) -> tuple[float, int]:
    chunks = [paths[i::procs] for i in range(procs)]
    t0 = time.perf_counter()
    total = sum(pool.map(_read_files, chunks))
    return time.perf_counter() - t0, total


def list_epoch(folder: Path) -> list[str]:
    """What a Dataset does first: list the epoch folder (readdir, readdir-plus fills entries)."""
    out = []
    for dirpath, _dirs, names in os.walk(folder):
        out += [os.path.join(dirpath, n) for n in sorted(names)]
    return out


class Server:
    """``epochfs mount`` over one cache, for the length of a ``with`` block."""

    def __init__(self, cache: Path, mnt: Path, env: dict[str, str]) -> None:
        self.cache, self.mnt, self.log = cache, mnt, mnt.parent / "mount.log"
        self.env = env

    def __enter__(self) -> Server:
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "epochfs.sidecar.cli", "mount", "--cache", str(self.cache),
                 "--mount", str(self.mnt)],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **self.env},
            )
        if not wait_for_mount(self.mnt, timeout=30, alive=lambda: self.proc.poll() is None):
            raise SystemExit(f"mount did not come up:\n{self.log.read_text()}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for path in (self.mnt, self.cache / "objects-ro"):
            if find_mount(path) is not None:
                lazy_unmount(path)

    def calls(self) -> str:
        m = re.search(r"calls served: (\{.*\})", self.log.read_text())
        return m.group(1) if m else "?"


def bench_class(args: argparse.Namespace, name: str, size: int, count: int, procs_list: list[int],
                drop: bool) -> tuple[list[dict[str, object]], str]:
    """All phases for one file size, on its own cache (each epoch holds exactly these files)."""
    work = args.dir / name
    cache, mnt = work / "cache", work / "mnt"
    mnt.mkdir(parents=True)
    store = open_store(cache, capacity=1 << 40, keep_epochs=1000)
    for start in range(0, count, 64):
        admit(store, make_objects(min(64, count - start), size, prefix="train/", start=start))
    store.cut(0)
    direct = [str(cache / "objects" / f.object_name) for f in store.epoch_files(0)]
    store.close()
    env = {"EPOCHFS_WARM_FILES": "0"} if args.no_warm else {}
    rows: list[dict[str, object]] = []
    epoch = 0
    with Server(cache, mnt, env) as server:
        for procs in procs_list:
            with mp.get_context("fork").Pool(procs) as pool:
                samples: dict[str, list[float]] = {k: [] for k in PHASES}
                for _ in range(args.repeat):  # interleaved, so load from others hits all phases
                    drop_caches(drop)
                    samples["direct_cold"].append(mbps(*timed_read(pool, procs, direct)))
                    timed_read(pool, procs, direct)  # untimed: a second touch settles the LRU
                    samples["direct_warm"].append(mbps(*timed_read(pool, procs, direct)))
                    for phase in ("mount_first_cold", "mount_first_warm"):
                        epoch += 1  # a fresh epoch: its lookup cuts it; the kernel knows none of it
                        if phase == "mount_first_cold":
                            drop_caches(drop)
                        t0 = time.perf_counter()
                        paths = list_epoch(mnt / f"epoch-{epoch}")  # listing is part of a first read
                        _, total = timed_read(pool, procs, paths)
                        samples[phase].append(total / (time.perf_counter() - t0) / 1e6)
                        assert len(paths) == count, (len(paths), count)
                    samples["mount_repeat"].append(mbps(*timed_read(pool, procs, paths)))
            med = {k: statistics.median(v) for k, v in samples.items()}
            row: dict[str, object] = {"size": name, "files": count, "procs": procs, "repeat": args.repeat}
            row |= {k: round(v) for k, v in med.items()}
            row["ratio_first_cold"] = round(med["mount_first_cold"] / med["direct_cold"], 2)
            row["ratio_first_warm"] = round(med["mount_first_warm"] / med["direct_warm"], 2)
            row["ratio_repeat"] = round(med["mount_repeat"] / med["direct_warm"], 2)
            rows.append(row)
            print(
                f"{name:>6} x{count:<5} procs={procs}  direct cold {med['direct_cold']:6.0f} MB/s"
                f"  warm {med['direct_warm']:6.0f} | mount first cold {med['mount_first_cold']:6.0f}"
                f" ({row['ratio_first_cold']:.2f}x)  first warm {med['mount_first_warm']:6.0f}"
                f" ({row['ratio_first_warm']:.2f}x)  repeat {med['mount_repeat']:6.0f}"
                f" ({row['ratio_repeat']:.2f}x)",
                flush=True,
            )
    return rows, server.calls()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=Path("/var/tmp/epochfs-bench"))
    ap.add_argument("--big", type=int, default=64, help="number of 4 MiB files")
    ap.add_argument("--small", type=int, default=4096, help="number of 64 KiB files")
    ap.add_argument("--procs", default="1,4", help="reader process counts")
    ap.add_argument("--repeat", type=int, default=3, help="runs per cell; the median is reported")
    ap.add_argument("--no-drop", action="store_true", help="never drop the page cache")
    ap.add_argument("--no-warm", action="store_true", help="turn the server's symlink warm-up off")
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args()
    drop = not args.no_drop
    if drop and os.geteuid() != 0:
        ap.error("dropping the page cache needs root (or pass --no-drop)")
    procs_list = [int(p) for p in args.procs.split(",")]
    for mnt in args.dir.glob("*/mnt"):
        lazy_unmount(mnt)
    shutil.rmtree(args.dir, ignore_errors=True)
    results: list[dict[str, object]] = []
    calls = {}
    try:
        for name, size, count in (("4MiB", 4 << 20, args.big), ("64KiB", 64 << 10, args.small)):
            rows, calls[name] = bench_class(args, name, size, count, procs_list, drop)
            results += rows
    finally:
        shutil.rmtree(args.dir, ignore_errors=True)
    print(f"page cache dropped before cold phases: {'yes' if drop else 'no (--no-drop)'}; "
          f"MB/s are medians of {args.repeat} interleaved runs; warm-up {'off' if args.no_warm else 'on'}")
    for name, c in calls.items():
        print(f"mount server Python calls ({name}): {c}")
    if args.json:
        args.json.write_text(json.dumps({"results": results, "calls": calls, "dropped": drop,
                                         "warm": not args.no_warm}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
