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
    .venv/bin/python -m epochfs.benchmarks.fuse_memory --files 10000 100000 --json m.json --plot m.png

``--plot FILE.png`` draws the bytes per file and the times against the files (:mod:`._fuse_memory_plot`).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import sqlite3
import subprocess
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
            # The running totals that admission keeps (a cut reads its extent from them).
            db.execute("INSERT OR REPLACE INTO counters SELECT 'cache_samples', COUNT(*) FROM samples")
            db.execute("INSERT OR REPLACE INTO counters SELECT 'cache_bytes', SUM(size) FROM samples")
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
        view.drop_built()
        view.tree(0)
        plain = time.perf_counter() - t0
    return {"files": files, "tree_bytes_per_file": kept / files, "peak_bytes_per_file": peak / files,
            "rss_bytes_per_file": (rss1 - rss0) / files, "build_s_traced": seconds, "build_s": plain}


_MALLINFO2_FIELDS = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
                     "fordblks", "keepcost")


def _mallinfo2() -> dict[str, int]:
    """glibc's malloc statistics of this process (``uordblks`` in use, ``fordblks`` free but kept)."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2_FIELDS]

    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = MallInfo2
    info = libc.mallinfo2()
    return {name: int(getattr(info, name)) for name in _MALLINFO2_FIELDS}


def _smaps_rollup(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                out[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return out


def probe_stats() -> dict[str, int]:
    """What the server holds, by part: RSS, glibc's heap (mallinfo2), the view's trees and manifests."""
    from epochfs.fuse.view import View

    built = [o.built_bytes() for o in gc.get_objects() if isinstance(o, View)]
    smaps = _smaps_rollup(os.getpid())
    return {"rss": rss(), "anonymous": smaps.get("Anonymous", 0), **_mallinfo2(),
            "tree_bytes": sum(b.trees for b in built), "manifest_bytes": sum(b.manifests for b in built),
            "manifest_kept_bytes": sum(b.manifests_kept for b in built)}


def _serve_probed(probe: Path, argv: list[str]) -> int:
    """``epochfs mount`` in this process, with a thread that answers ``probe/req-N`` files with
    ``probe/resp-N`` (:func:`probe_stats` as JSON): what only the server's own process can see."""
    import threading

    def answer() -> None:
        n = 0
        while True:
            req = probe / f"req-{n}"
            if req.exists():
                tmp = probe / f".resp-{n}"
                tmp.write_text(json.dumps(probe_stats()))
                tmp.rename(probe / f"resp-{n}")
                n += 1
            else:
                time.sleep(0.02)

    threading.Thread(target=answer, daemon=True, name="probe").start()
    from epochfs.sidecar.cli import main as epochfs_main

    return epochfs_main(argv)


class _Probe:
    def __init__(self, folder: Path, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.folder = folder
        self.proc = proc
        self.log = log
        self.n = 0

    def __call__(self) -> dict[str, int]:
        n, self.n = self.n, self.n + 1
        (self.folder / f"req-{n}").write_text("")
        resp = self.folder / f"resp-{n}"
        harness.wait_ready(self.proc, resp.exists, what="the server's memory probe", timeout=120.0,
                           interval=0.02, log=self.log)
        return dict(json.loads(resp.read_text()))


def _forget_kernel_entries() -> bool:
    """Make the kernel drop its unused dentries and inodes (FORGETs to the server). Root only."""
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2\n")
    except OSError:
        return False
    return True


def _settled(probe: _Probe) -> dict[str, int]:
    """Probe until the RSS stops falling (the server works through the kernel's FORGETs)."""
    last = probe()
    for _ in range(100):
        time.sleep(0.2)
        now = probe()
        if now["rss"] >= last["rss"] - 64 * 1024:
            return now
        last = now
    return last


def measure_mount(work: Path, cache: Path, files: int, api: str = "lowlevel") -> dict[str, float]:
    """A real mount: every folder of epoch 0 scanned; the server's RSS growth per file, by part.

    Parts: after the scan (tree built, libfuse holding a node per entry the kernel was handed);
    after the kernel forgot its entries (``drop_caches``: libfuse frees its nodes; what stays is the
    server's own: the tree, glibc's kept heap); after the epoch's manifest is read whole.
    """
    mnt = work / f"mnt-{api}"
    mnt.mkdir()
    probe_dir = work / f"probe-{api}"
    probe_dir.mkdir()
    env = {**os.environ, "EPOCHFS_WARM_FILES": "0", "EPOCHFS_FUSE_API": api}
    cmd = [*harness.PYTHON, "-m", "epochfs.benchmarks.fuse_memory", "--serve", str(probe_dir), "--",
           "mount", "--cache", str(cache), "--mount", str(mnt)]
    with harness.running(cmd, what="epochfs mount", ready=lambda: harness.mounted(mnt), interval=0.02,
                         log=work / f"mount-{api}.log", env=env, unmount=(mnt, cache / "objects-ro")) as proc:
        probe = _Probe(probe_dir, proc, work / f"mount-{api}.log")
        p0 = probe()
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
        p1 = probe()
        t0 = time.perf_counter()
        again = sum(1 for d in os.scandir(mnt / "epoch-0" / "train") for _ in os.scandir(d.path))
        repeat = time.perf_counter() - t0
        forgot = _forget_kernel_entries()
        p2 = _settled(probe) if forgot else None
        with open(mnt / ".epochfs" / "epoch-0.manifest", "rb") as f:
            while f.read(1 << 20):
                pass
        p3 = probe()
    assert seen == files == again, (seen, files, again)
    out: dict[str, float] = {"scandir_s": seconds, "scandir_repeat_s": repeat,
                             "server_rss_bytes_per_file": (p1["rss"] - p0["rss"]) / files,
                             "server_tree_bytes_per_file": p1["tree_bytes"] / files,
                             "server_heap_free_bytes_per_file": (p1["fordblks"] - p0["fordblks"]) / files}
    if p2 is not None:
        out.update({"libfuse_nodes_bytes_per_file": (p1["rss"] - p2["rss"]) / files,
                    "server_own_bytes_per_file": (p2["rss"] - p0["rss"]) / files,
                    "manifest_rss_bytes_per_file": (p3["rss"] - p2["rss"]) / files,
                    "manifest_kept_bytes_per_file": p3["manifest_kept_bytes"] / files,
                    "server_total_bytes_per_file": (p3["rss"] - p0["rss"]) / files})
    out["probes"] = [p for p in (p0, p1, p2, p3) if p is not None]  # type: ignore[assignment]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--mount-max", type=int, default=100_000, help="mount and scan only up to this size")
    ap.add_argument("--apis", nargs="+", choices=("lowlevel", "highlevel"), default=["lowlevel", "highlevel"],
                    help="libfuse APIs to mount with (each a server of its own over the same store)")
    ap.add_argument("--dir", type=Path, default=None,
                    help=harness.DIR_HELP + " (default: the system's temp folder)")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--plot", type=Path, default=None, help=harness.PLOT_HELP + ": bytes per file and "
                    "seconds against the files, the 200 B aim dashed")
    ap.add_argument("--measure-tree", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--serve", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve is not None:
        return _serve_probed(args.serve, args.rest)
    if args.measure_tree is not None:
        print(json.dumps(measure_tree(args.measure_tree)))
        return 0
    if args.plot is not None:
        harness.require("matplotlib")  # before the stores are made, not after
    results = []
    table = harness.Table(("files", ">9d"), ("api", ">9s"), ("tree B/file", ">11.0f"),
                           ("peak B/file", ">11.0f"), ("RSS B/file", ">10.0f"),
                           ("build s", ">8.2f"), ("scandir s", ">9s"),
                           ("server RSS B/file", ">17s"), ("libfuse nodes", ">13s"), ("own", ">5s"),
                           ("manifest", ">8s"), ("total", ">6s"))
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
            tree: dict[str, float] = {**json.loads(out.stdout.splitlines()[-1]), "store_s": made}
            for api in (args.apis if files <= args.mount_max else ["-"]):
                row: dict[str, Any] = {**tree, "files": files, "api": api}
                if api != "-":
                    row.update(measure_mount(here, cache, files, api))
                results.append(row)
                print(table.row(files, api, row["tree_bytes_per_file"], row["peak_bytes_per_file"],
                                row["rss_bytes_per_file"], row["build_s"],
                                f"{row['scandir_s']:.2f}" if "scandir_s" in row else "-",
                                *(f"{row[k]:.0f}" if k in row else "-" for k in (
                                    "server_rss_bytes_per_file", "libfuse_nodes_bytes_per_file",
                                    "server_own_bytes_per_file", "manifest_rss_bytes_per_file",
                                    "server_total_bytes_per_file"))),
                      flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    if args.plot is not None:
        from epochfs.benchmarks import _fuse_memory_plot  # matplotlib only when a plot is asked for

        _fuse_memory_plot.write(args.plot, results)
    return 0


if __name__ == "__main__":
    harness.entry(main, "fuse_memory")
