"""The FUSE server's memory per file of an epoch (issue 14: aim under 200 bytes per live file).

For each size (``--files``, default 100,000 and 1,000,000) a store is made with that many samples
in ImageNet-like folders (``train/<class>/<class>_<n>.JPEG``, 1,000 per class; rows written with
plain SQL, no object files: the tree is built from the index alone) and epoch 0 cut. Then:

* **tree**, in a fresh process: the view builds epoch 0's tree (what the server does on the first
  lookup inside it); bytes per file it keeps (tracemalloc, after a collection), its peak while
  building, the process's RSS growth, and the build time;
* **mount**, for sizes up to ``--mount-max`` (default 100,000): a real ``epochfs mount`` (warm-up
  off); every folder of the epoch listed with ``os.scandir`` (readdir-plus: the kernel gets every
  entry's attributes), timed, and the server's RSS growth per file.

    .venv/bin/python -m epochfs.benchmarks.fuse_memory
    .venv/bin/python -m epochfs.benchmarks.fuse_memory --files 100000 --mount-max 0 --json out.json
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

from epochfs.benchmarks import harness
from epochfs.sidecar.store import INDEX_NAME, Policy, Store

PER_CLASS = 1000


def make_store(cache: Path, files: int) -> None:
    """A store of ``files`` samples and epoch 0 cut over them (index rows only)."""
    store = Store(cache, create=True)
    store.configure(Policy(capacity=1 << 50, keep_epochs=2, min_samples=1, in_use_seconds=600.0))
    store.close()
    now = time.time()

    def rows() -> Iterator[tuple[object, ...]]:
        for i in range(files):
            cls = f"n{1440764 + i // PER_CLASS:08d}"
            key = f"train/{cls}/{cls}_{i:07d}.JPEG"
            sid = hashlib.blake2b(key.encode(), digest_size=16).hexdigest()
            yield sid, key, key, 110_000, "md5:" + sid, "v1", now

    db = sqlite3.connect(cache / INDEX_NAME)
    try:
        with db:
            db.executemany("INSERT INTO samples(sid, key, path, size, checksum, version, admitted_at) "
                           "VALUES(?,?,?,?,?,?,?)", rows())
    finally:
        db.close()
    with Store(cache) as store:
        assert store.cut(0, force=True) == 0


def rss() -> int:
    return _rss_of(os.getpid())


def _rss_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def measure_tree(cache: Path) -> dict[str, float]:
    """Build epoch 0's tree as the server's view does (run in a fresh process)."""
    from epochfs.fuse.view import View

    with Store(cache) as store:
        view = View(store=store, link_root=Path("/var/cache/epochfs-ro/objects"))
        files = store.epochs()[0].samples
        gc.collect()
        rss0 = rss()
        tracemalloc.start()
        t0 = time.perf_counter()
        tree = view.tree(0)
        seconds = time.perf_counter() - t0
        gc.collect()
        kept, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rss1 = rss()
        assert tree.lookup("train").is_dir
        # the time to build without tracemalloc's overhead: a second, fresh build
        t0 = time.perf_counter()
        view._trees.clear()
        view.tree(0)
        plain = time.perf_counter() - t0
    return {"files": files, "tree_bytes_per_file": kept / files, "peak_bytes_per_file": peak / files,
            "rss_bytes_per_file": (rss1 - rss0) / files, "build_s_traced": seconds, "build_s": plain}


def measure_mount(work: Path, cache: Path, files: int) -> dict[str, float]:
    """A real mount: every folder of epoch 0 scanned; the server's RSS growth per file."""
    mnt = work / "mnt"
    mnt.mkdir()
    env = {**os.environ, "EPOCHFS_WARM_FILES": "0"}
    with harness.running([*harness.EPOCHFS, "mount", "--cache", str(cache), "--mount", str(mnt)],
                         what="epochfs mount", ready=lambda: harness.mounted(mnt), interval=0.02,
                         log=work / "mount.log", env=env, unmount=(mnt, cache / "objects-ro")) as proc:
        rss0 = _rss_of(proc.pid)
        t0 = time.perf_counter()
        seen = 0
        todo = [mnt / "epoch-0"]
        while todo:
            with os.scandir(todo.pop()) as it:
                for entry in it:
                    if entry.is_dir(follow_symlinks=False):
                        todo.append(Path(entry.path))
                    else:
                        seen += 1
        seconds = time.perf_counter() - t0
        rss1 = _rss_of(proc.pid)
        t0 = time.perf_counter()
        again = sum(1 for d in os.scandir(mnt / "epoch-0" / "train") for _ in os.scandir(d.path))
        repeat = time.perf_counter() - t0
    assert seen == files == again, (seen, files, again)
    return {"scandir_s": seconds, "scandir_repeat_s": repeat,
            "server_rss_bytes_per_file": (rss1 - rss0) / files}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--mount-max", type=int, default=100_000, help="mount and scan only up to this size")
    ap.add_argument("--dir", type=Path, default=None, help="scratch folder (emptied first)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--measure-tree", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.measure_tree is not None:
        print(json.dumps(measure_tree(args.measure_tree)))
        return 0
    results = []
    table = harness.Table(("files", ">9d"), ("tree B/file", ">11.0f"), ("peak B/file", ">11.0f"),
                           ("RSS B/file", ">10.0f"), ("build s", ">8.2f"), ("scandir s", ">9s"),
                           ("server RSS B/file", ">17s"))
    print(table.header())
    with harness.work_dir(args.dir) as work:
        for files in args.files:
            here = work / f"n{files}"
            cache = here / "cache"
            t0 = time.perf_counter()
            make_store(cache, files)
            made = time.perf_counter() - t0
            out = subprocess.run([*harness.PYTHON, "-m", "epochfs.benchmarks.fuse_memory", "--measure-tree",
                                  str(cache)], check=True, capture_output=True, text=True)
            row: dict[str, float] = {**json.loads(out.stdout.splitlines()[-1]), "store_s": made}
            if files <= args.mount_max:
                row.update(measure_mount(here, cache, files))
            results.append(row)
            print(table.row(files, row["tree_bytes_per_file"], row["peak_bytes_per_file"],
                            row["rss_bytes_per_file"], row["build_s"],
                            f"{row['scandir_s']:.2f}" if "scandir_s" in row else "-",
                            f"{row['server_rss_bytes_per_file']:.0f}" if "scandir_s" in row else "-"),
                  flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
