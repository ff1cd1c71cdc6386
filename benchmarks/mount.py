"""Read throughput through the epochfs mount versus direct reads of the cache folder (one run).

Same files on the node volume, read three ways, with 1 and N reader processes, per file size:

* ``direct``: the object files in ``<cache>/objects`` (the baseline), page cache cold, then warm;
* ``mount first``: a freshly cut epoch, never seen by the kernel, listed and read through the
  mount (every entry and symlink target is new to the kernel), with data cold and with data warm;
* ``mount repeat``: the same epoch again (entries, attributes and symlink targets cached).

Cold phases drop the page cache first (``echo 3 > /proc/sys/vm/drop_caches``, root only); with
``--no-drop`` every phase is warm and the report says so. Ratios compare like with like: mount
first (cold) / direct cold, mount first (warm) / direct warm, mount repeat / direct warm.

    sudo epochfs bench mount --args --dir /var/tmp/epochfs-bench
    sudo .venv/bin/python -m epochfs.benchmarks.mount --dir /var/tmp/epochfs-bench

The mount server's Python call counts are printed too (from its shutdown log line): the design
aims for one readlink per file on a first read and none on a repeat.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing.pool
import os
import random
import re
import shutil
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

from epochfs.benchmarks import harness
from epochfs.sidecar.keys import sample_id
from epochfs.sidecar.store import Admission, Policy, Store

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


def paced_read(paths: list[str], rate: float) -> float:
    """Read like a trainer consuming ``rate`` bytes/s (sleeping when ahead); returns MB/s achieved."""
    total = 0
    view = memoryview(BUF)
    t0 = time.perf_counter()
    for p in paths:
        ahead = t0 + total / rate - time.perf_counter()
        if ahead > 0:
            time.sleep(ahead)
        fd = os.open(p, os.O_RDONLY)
        try:
            while (n := os.readv(fd, [view])) > 0:
                total += n
        finally:
            os.close(fd)
    return total / (time.perf_counter() - t0) / 1e6


def drop_caches(enabled: bool) -> None:
    if not enabled:
        return
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def timed_read(pool: multiprocessing.pool.Pool, procs: int, paths: list[str]) -> tuple[int, float]:
    """Bytes read by ``procs`` readers sharing ``paths``, and the seconds it took."""
    chunks = [paths[i::procs] for i in range(procs)]
    return harness.timed(lambda: sum(pool.map(_read_files, chunks)))


def list_epoch(folder: Path) -> list[str]:
    """What a Dataset does first: list the epoch folder (readdir, readdir-plus fills entries)."""
    out = []
    for dirpath, _dirs, names in os.walk(folder):
        out += [os.path.join(dirpath, n) for n in sorted(names)]
    return out


def first_read(pool: multiprocessing.pool.Pool, procs: int, folder: Path) -> tuple[list[str], int, float]:
    """A first read of a folder: list it, then read every file, the listing inside the timing;
    returns the paths, the bytes and the seconds."""
    t0 = time.perf_counter()
    paths = list_epoch(folder)
    total, _ = timed_read(pool, procs, paths)
    return paths, total, time.perf_counter() - t0


def make_objects(count: int, size: int, *, start: int = 0) -> Iterator[tuple[str, bytes]]:
    """``count`` (key, random bytes) pairs from index ``start``: ``train/00000.bin`` on."""
    rng = random.Random(start)
    for i in range(start, start + count):
        yield f"train/{i:05d}.bin", rng.randbytes(size)


def fill_cache(cache: Path, size: int, count: int) -> list[str]:
    """A cache of ``count`` files of ``size`` bytes, all in epoch 0, made through the Store API as the
    sampler makes it (temp file, fsync, one admission per 64); returns the object files' paths."""
    store = Store(cache, create=True)
    try:
        store.configure(Policy(capacity=1 << 40, keep_epochs=1000, min_samples=1, in_use_seconds=300.0))
        for start in range(0, count, 64):
            batch = []
            for key, body in make_objects(min(64, count - start), size, start=start):
                temp = store.temp_path()
                with open(temp, "wb") as f:
                    f.write(body)
                    f.flush()
                    os.fsync(f.fileno())
                checksum = "md5:" + hashlib.md5(body).hexdigest()
                batch.append(Admission(key, sample_id(key), size, checksum, "v1", temp))
            store.admit(batch, inflight_bytes=0)
        store.cut(0)
        return [str(cache / "objects" / f.object_name) for f in store.epoch_files(0)]
    finally:
        store.close()


def _ratio_range(samples: dict[str, list[float]], ratio: str) -> list[float]:
    """[min, max] of one ratio (``first_cold``, ``first_warm``, ``repeat``) over the interleaved
    runs, each run's mount phase against the same run's direct phase: the spread beside the median."""
    mount, direct = {"first_cold": ("mount_first_cold", "direct_cold"),
                     "first_warm": ("mount_first_warm", "direct_warm"),
                     "repeat": ("mount_repeat", "direct_warm")}[ratio]
    runs = [m / d for m, d in zip(samples[mount], samples[direct], strict=True)]
    return [round(min(runs), 2), round(max(runs), 2)]


def served_calls(log: Path) -> str:
    """The mount server's Python call counts, from its shutdown log line."""
    m = re.search(r"calls served: (\{.*\})", log.read_text())
    return m.group(1) if m else "?"


def bench_class(args: argparse.Namespace, scratch: Path, name: str, size: int, count: int,
                procs_list: list[int], drop: bool) -> tuple[list[dict[str, object]], str]:
    """All phases for one file size, on its own cache in ``scratch`` (each epoch holds exactly
    these files)."""
    work = scratch / name
    cache, mnt = work / "cache", work / "mnt"
    mnt.mkdir(parents=True)
    direct = fill_cache(cache, size, count)
    env = {"EPOCHFS_WARM_FILES": "0"} if args.no_warm else {}
    rows: list[dict[str, object]] = []
    epoch = 0
    log = work / "mount.log"
    with harness.running([*harness.EPOCHFS, "mount", "--cache", str(cache), "--mount", str(mnt)],
                         what="epochfs mount", ready=lambda: harness.mounted(mnt), interval=0.02, log=log,
                         env={**os.environ, **env}, unmount=(mnt, cache / "objects-ro")):
        for procs in procs_list:
            with harness.fork_pool(procs) as pool:  # every reader gone after it, a SIGTERM or not
                samples: dict[str, list[float]] = {k: [] for k in PHASES}
                for _ in range(args.repeat):  # interleaved, so load from others hits all phases
                    drop_caches(drop)
                    samples["direct_cold"].append(harness.mb_per_s(*timed_read(pool, procs, direct)))
                    timed_read(pool, procs, direct)  # untimed: a second touch settles the LRU
                    samples["direct_warm"].append(harness.mb_per_s(*timed_read(pool, procs, direct)))
                    for phase in ("mount_first_cold", "mount_first_warm"):
                        epoch += 1  # a fresh epoch: its lookup cuts it; the kernel knows none of it
                        if phase == "mount_first_cold":
                            drop_caches(drop)
                        paths, total, seconds = first_read(pool, procs, mnt / f"epoch-{epoch}")
                        samples[phase].append(harness.mb_per_s(total, seconds))
                        assert len(paths) == count, (len(paths), count)
                    samples["mount_repeat"].append(harness.mb_per_s(*timed_read(pool, procs, paths)))
            med = {k: statistics.median(v) for k, v in samples.items()}
            ratio = {"first_cold": round(med["mount_first_cold"] / med["direct_cold"], 2),
                     "first_warm": round(med["mount_first_warm"] / med["direct_warm"], 2),
                     "repeat": round(med["mount_repeat"] / med["direct_warm"], 2)}
            row: dict[str, object] = {"size": name, "files": count, "procs": procs, "repeat": args.repeat}
            row |= {k: round(v) for k, v in med.items()}
            row |= {f"ratio_{k}": v for k, v in ratio.items()}
            row |= {f"ratio_{k}_range": _ratio_range(samples, k) for k in ratio}  # the plot's error bars
            rows.append(row)
            print(
                f"{name:>6} x{count:<5} procs={procs}  direct cold {med['direct_cold']:6.0f} MB/s"
                f"  warm {med['direct_warm']:6.0f} | mount first cold {med['mount_first_cold']:6.0f}"
                f" ({harness.times(ratio['first_cold'])})  first warm {med['mount_first_warm']:6.0f}"
                f" ({harness.times(ratio['first_warm'])})  repeat {med['mount_repeat']:6.0f}"
                f" ({harness.times(ratio['repeat'])})",
                flush=True,
            )
        if args.pace > 0:
            # A trainer-like reader at a fixed rate, one process, data warm: does a fresh epoch keep up?
            epoch += 1
            fresh = list_epoch(mnt / f"epoch-{epoch}")
            paced = {"direct": paced_read(direct, args.pace * 1e6),
                     "mount_first": paced_read(fresh, args.pace * 1e6)}
            print(f"{name:>6} paced at {args.pace:.0f} MB/s, one reader, data warm: direct "
                  f"{paced['direct']:.0f} MB/s, fresh epoch through the mount {paced['mount_first']:.0f}"
                  f" MB/s ({harness.times(paced['mount_first'] / paced['direct'])})", flush=True)
            rows.append({"size": name, "pace_mbps": args.pace, "paced_direct": round(paced["direct"]),
                         "paced_mount_first": round(paced["mount_first"])})
        rows.append(per_open(name, direct, paths))
    return rows, served_calls(log)


def per_open(name: str, direct: list[str], mounted: list[str], passes: int = 7) -> dict[str, object]:
    """Per-open cost in one process, warm, ``passes`` interleaved passes (less noisy than throughput
    under load): the median of each side with its [min-max], their ratio a ratio of the medians."""
    per_file: dict[str, list[float]] = {"direct": [], "mount": []}
    for _ in range(passes):
        for key, files in (("direct", direct), ("mount", mounted)):
            t0 = time.perf_counter()
            _read_files(files)
            per_file[key].append((time.perf_counter() - t0) / len(files) * 1e6)
    med = {k: statistics.median(v) for k, v in per_file.items()}
    print(f"{name:>6} warm, one process, median [min-max] of {passes}: "
          f"{harness.spread(per_file['direct'], '.1f')} us/file direct, "
          f"{harness.spread(per_file['mount'], '.1f')} us/file through the mount "
          f"({harness.times(med['direct'] / med['mount'])})", flush=True)
    return {"size": name, "passes": passes, "us_per_file_direct": round(med["direct"], 2),
            "us_per_file_mount": round(med["mount"], 2),
            **{f"us_per_file_{k}_range": [round(min(v), 2), round(max(v), 2)] for k, v in per_file.items()}}


def remote_mount_command(tool: str, *, endpoint: str, mnt: Path, cache: Path, work: Path,
                         env: dict[str, str]) -> list[str]:
    """The command that mounts moto's ``bkt/train`` read-only at ``mnt`` with ``tool``'s disk cache."""
    if tool == "rclone":
        env.update(harness.rclone_env("moto", endpoint))
        return [harness.program("rclone"), "mount", "moto:bkt/train", str(mnt), "--vfs-cache-mode", "full",
                "--cache-dir", str(cache), "--read-only", "--allow-other"]
    if tool == "s3fs":
        passwd = work / "passwd-s3fs"
        passwd.write_text("{AWS_ACCESS_KEY_ID}:{AWS_SECRET_ACCESS_KEY}\n".format(**harness.CREDENTIALS))
        passwd.chmod(0o600)
        return [harness.program("s3fs"), "bkt:/train", str(mnt), "-f", "-o",
                f"url={endpoint},use_path_request_style,use_cache={cache},passwd_file={passwd},"
                "ro,allow_other,parallel_count=8"]
    raise ValueError(f"unknown remote mount tool {tool!r}")


def bench_remote_mount(args: argparse.Namespace, scratch: Path, tool: str, name: str, size: int,
                       count: int, procs_list: list[int], drop: bool) -> list[dict[str, object]]:
    """The same files in a local S3 server (moto), read through ``rclone mount --vfs-cache-mode full``
    or ``s3fs -o use_cache``.

    First read: a fresh cache, so the tool downloads every object; repeat: the same files again,
    served from the tool's on-disk cache through its own FUSE daemon.
    """
    work = scratch / f"{tool}-{name}"
    mnt, rcache = work / "mnt", work / "rcache"
    mnt.mkdir(parents=True)
    rows: list[dict[str, object]] = []
    with harness.moto_server() as moto:
        for start in range(0, count, 64):
            batch = list(make_objects(min(64, count - start), size, start=start))
            harness.put_objects(moto.endpoint, "bkt", len(batch), batch.__getitem__)
        env = harness.s3_env()
        for procs in procs_list:
            shutil.rmtree(rcache, ignore_errors=True)
            rcache.mkdir(parents=True)
            command = remote_mount_command(tool, endpoint=moto.endpoint, mnt=mnt, cache=rcache, work=work,
                                           env=env)
            with harness.running(command, what=f"{tool} mount", ready=lambda: harness.mounted(mnt),
                                 interval=0.02, env=env, unmount=(mnt,)), \
                    harness.fork_pool(procs) as pool:
                drop_caches(drop)
                paths, total, seconds = first_read(pool, procs, mnt)
                first = harness.mb_per_s(total, seconds)
                repeat = statistics.median(harness.mb_per_s(*timed_read(pool, procs, paths))
                                           for _ in range(args.repeat))
            assert len(paths) == count, (len(paths), count)
            rows.append({"size": name, "files": count, "procs": procs, f"{tool}_first": round(first),
                         f"{tool}_repeat": round(repeat)})
            print(f"{name:>6} x{count:<5} procs={procs}  {tool} first {first:6.0f} MB/s (downloads "
                  f"from moto)  repeat {repeat:6.0f} MB/s (median of {args.repeat})", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=Path("/var/tmp/epochfs-bench"),
                    help=harness.DIR_HELP + " (default: /var/tmp/epochfs-bench)")
    ap.add_argument("--big", type=int, default=256, help="number of 4 MiB files (0: skip)")
    ap.add_argument("--small", type=int, default=4096, help="number of 64 KiB files (0: skip)")
    ap.add_argument("--procs", default="1,4", help="reader process counts")
    ap.add_argument("--repeat", type=int, default=3, help="runs per cell; the median is reported")
    ap.add_argument("--no-drop", action="store_true", help="never drop the page cache")
    ap.add_argument("--no-warm", action="store_true", help="turn the server's symlink warm-up off")
    ap.add_argument("--pace", type=float, default=600.0,
                    help="MB/s of the paced (trainer-like) reader; 0 skips that phase")
    ap.add_argument("--rclone", action="store_true",
                    help="also read the same files from a local S3 (moto) through rclone mount")
    ap.add_argument("--s3fs", action="store_true",
                    help="also read the same files from a local S3 (moto) through s3fs -o use_cache")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--plot", type=Path, help=harness.PLOT_HELP + ": each ratio to direct reads")
    args = ap.parse_args(argv)
    if min(args.big, args.small, args.repeat) < 0 or args.repeat == 0:
        ap.error("--big and --small must be 0 (skip) or more, --repeat at least 1")
    drop = not args.no_drop
    if drop and os.geteuid() != 0:
        ap.error("dropping the page cache needs root (or pass --no-drop)")
    procs_list = [int(p) for p in args.procs.split(",")]
    harness.require("mfusepy")  # epochfs mount
    remotes = [tool for tool in ("rclone", "s3fs") if getattr(args, tool)]
    if remotes:
        harness.require("boto3", "moto", "flask", "flask_cors")
        for tool in remotes:
            harness.program(tool)
    results: list[dict[str, object]] = []
    calls = {}
    sizes = (("4MiB", 4 << 20, args.big), ("64KiB", 64 << 10, args.small))
    classes = [c for c in sizes if c[2] > 0]  # 0 skips that size (an epoch of no files is not cut)
    with harness.work_dir(args.dir, prefix="epochfs-bench-mount-") as scratch:
        for name, size, count in classes:
            rows, calls[name] = bench_class(args, scratch, name, size, count, procs_list, drop)
            results += rows
            for tool in remotes:
                results += bench_remote_mount(args, scratch, tool, name, size, count, procs_list, drop)
    print(f"page cache dropped before cold phases: {'yes' if drop else 'no (--no-drop)'}; "
          f"MB/s are medians of {args.repeat} interleaved runs; warm-up {'off' if args.no_warm else 'on'}")
    for name, c in calls.items():
        print(f"mount server Python calls ({name}): {c}")
    if args.json:
        args.json.write_text(json.dumps({"results": results, "calls": calls, "dropped": drop,
                                         "warm": not args.no_warm}, indent=2))
    harness.write_plot(args.plot, "mount", results)
    return 0


if __name__ == "__main__":
    harness.entry(main, "mount")
