"""The folder view (``--view folder``): time to publish an epoch, and reads through it next to the
FUSE view and direct reads, in one run.

1. **Publishing.** A store of N entries (``--entries``, default 10,000 and 100,000; one-byte
   objects in 100 folders): the time :class:`FolderPublisher` takes to make a new epoch appear
   (manifest, folders, symlinks, fsyncs, the rename; ``latest`` and ``status.json``; wall and CPU
   seconds: the difference is waiting, mostly for fsyncs), and to retire one, median of
   ``--repeat``, against the bare cost of the same links (a plain loop of mkdir and symlink, no
   manifest, fsync or rename, in the same run); the disk the published epoch takes (blocks; one
   inode per entry besides), with a short link root (targets of 55 bytes, which ext4 keeps in the
   inode) and a long one (65 bytes: a 4 KiB block per entry on ext4).
2. **Reads**, for 4 MiB (``--big``) and 64 KiB (``--small``) files in one cache: direct reads of
   the object files (the baseline), the folder view and the FUSE view (``epochfs mount``), each with
   ``first`` (a freshly published or cut epoch: every entry new to the kernel; page cache dropped
   first, ``cold``, or kept, ``warm``) and ``repeat`` (the same epoch again). Both views point into
   the same read-only link root (a read-only bind of the objects folder at a short path, as in a
   pod); ratios compare with direct reads in the same state.

    sudo epochfs bench folderview --args --dir /var/tmp/epochfs-bench
    sudo .venv/bin/python -m epochfs.benchmarks.folderview --entries 10000 --big 64 --small 1024

Cold phases drop the page cache (root only); ``--no-drop`` keeps every phase warm.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from epochfs.benchmarks import harness
from epochfs.benchmarks._folderview_stores import SHORT_ROOT, tiny_store
from epochfs.benchmarks._folderview_wait import bench_wait
from epochfs.benchmarks.mount import drop_caches, fill_cache, first_read, timed_read
from epochfs.fuse.mounting import lazy_unmount, make_readonly_bind
from epochfs.fuse.view import EpochTree
from epochfs.sidecar.folderview import FolderPublisher, remove_tree
from epochfs.sidecar.store import Policy, Store

# The trainer's wait at an epoch boundary (--wait, run first) is _folderview_wait; the one-byte
# stores publishing and the wait work on are _folderview_stores.
LONG_ROOT = Path("/var/cache/epochfs-ro/objects")  # the FUSE view's default: 65 bytes
READ_PHASES = ("direct_cold", "direct_warm", "folder_first_cold", "folder_first_warm", "folder_repeat",
               "fuse_first_cold", "fuse_first_warm", "fuse_repeat")


# ---------------------------------------------------------------------------------- publishing
def disk_bytes(folder: Path) -> int:
    """Blocks allocated below ``folder`` (lstat: the links themselves), in bytes."""
    total = os.lstat(folder).st_blocks * 512
    for dirpath, dirs, files in os.walk(folder):
        for name in dirs + files:
            total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total


def bare_links(tree: EpochTree, root: Path) -> None:
    """The baseline: the same folders and symlinks made by a plain loop (no manifest, no fsync, no
    rename), as ``cp -as`` or a script would make them."""
    for rel in sorted(tree.dirs):
        os.makedirs(root / rel if rel else root, exist_ok=True)
    for rel, target in tree.links.items():
        os.symlink(target, root / rel)


def bench_publish(work: Path, entries: int, repeat: int) -> list[dict[str, object]]:
    """Publish a new epoch of ``entries`` entries and retire the one before, ``repeat`` times, for a
    short and a long link root; one row each."""
    rows: list[dict[str, object]] = []
    store = tiny_store(work / f"publish-{entries}" / "cache", entries)
    # Keep only the newest epoch, so that each retire() retires the one before.
    store.configure(Policy(capacity=1 << 40, keep_epochs=1, min_samples=1, in_use_seconds=1.0))
    try:
        for label, root in (("short", SHORT_ROOT), ("long", LONG_ROOT)):
            folder = work / f"publish-{entries}" / f"view-{label}"
            publisher = FolderPublisher(store=store, folder=folder, link_root=root, grace=False)
            publisher.recover()
            store.cut(force=True)
            store.retire(now=time.time() + 10_000)  # one live epoch: the next round retires it
            publisher.step(force_status=True)
            publish, cpu, retire, bare, disk = [], [], [], [], 0
            for _ in range(repeat):
                n = store.cut(force=True)
                t0, c0 = time.perf_counter(), harness.self_cpu()
                done = publisher.step()
                publish.append(time.perf_counter() - t0)
                cpu.append(harness.self_cpu() - c0)
                assert n is not None and done.published == [n], (n, done)
                disk = disk_bytes(folder / f"epoch-{n}")
                plain = folder.parent / f"bare-{label}"
                tree = publisher.view.tree(n)
                t0 = time.perf_counter()
                bare_links(tree, plain)
                bare.append(time.perf_counter() - t0)
                remove_tree(plain)
                gone = store.retire(now=time.time() + 10_000)
                t0 = time.perf_counter()
                done = publisher.step()
                retire.append(time.perf_counter() - t0)
                assert done.retired == gone == [n - 1], (gone, done)
            seconds = statistics.median(publish)
            row: dict[str, object] = {
                "entries": entries, "link_root": label, "target_bytes": len(str(root)) + 36,
                "publish_s": round(seconds, 3), "entries_per_s": round(entries / seconds),
                "publish_cpu_s": round(statistics.median(cpu), 3),
                "bare_links_s": round(statistics.median(bare), 3),
                "retire_s": round(statistics.median(retire), 3), "disk_mb": round(disk / 1e6, 1),
                "repeat": repeat}
            rows.append(row)
            print(f"publish {entries:>7} entries, link root {label:5} ({row['target_bytes']} B targets): "
                  f"{seconds:6.2f} s ({row['entries_per_s']:>7} entries/s; CPU "
                  f"{row['publish_cpu_s']:5.2f} s), bare links {row['bare_links_s']:5.2f} s "
                  f"({harness.times(seconds / statistics.median(bare))}), retire {row['retire_s']:5.2f} s, "
                  f"{row['disk_mb']:6.1f} MB on disk per epoch", flush=True)
            remove_tree(folder)
    finally:
        store.close()
    return rows


# ---------------------------------------------------------------------------------- reads
def short_link_root(objects: Path, name: str) -> Path:
    """A read-only bind of ``objects`` at a short path (root), as the chart's /epochfs-ro/objects;
    without root, ``objects`` itself."""
    if os.geteuid() != 0:
        return objects
    target = Path(f"/run/efb{os.getpid()}{name}")
    target.mkdir(exist_ok=True)
    if not make_readonly_bind(objects, target):
        target.rmdir()
        return objects
    return target


def bench_reads(args: argparse.Namespace, scratch: Path, name: str, size: int, count: int,
                drop: bool) -> dict[str, object]:
    """Every read phase for one file size, interleaved ``--repeat`` times, in ``scratch``; medians
    in MB/s."""
    work = scratch / f"reads-{name}"
    cache, folder, mnt = work / "cache", work / "shared" / "view", work / "mnt"
    mnt.mkdir(parents=True)
    folder.parent.mkdir()
    direct = fill_cache(cache, size, count)  # epoch 0
    root = short_link_root(cache / "objects", name)
    store = Store(cache)
    store.configure(Policy(capacity=1 << 40, keep_epochs=3, min_samples=1, in_use_seconds=1.0))
    publisher = FolderPublisher(store=store, folder=folder, link_root=root, grace=False)
    publisher.recover()
    samples: dict[str, list[float]] = {k: [] for k in READ_PHASES}
    procs = args.procs
    try:
        with harness.running([*harness.EPOCHFS, "mount", "--cache", str(cache), "--mount", str(mnt),
                              "--link-root", str(root)], what="epochfs mount",
                             ready=lambda: harness.mounted(mnt), interval=0.02, log=work / "mount.log",
                             unmount=(mnt,)), harness.fork_pool(procs) as pool:
            for _ in range(args.repeat):
                drop_caches(drop)
                samples["direct_cold"].append(harness.mb_per_s(*timed_read(pool, procs, direct)))
                timed_read(pool, procs, direct)  # untimed: a second touch settles the LRU
                samples["direct_warm"].append(harness.mb_per_s(*timed_read(pool, procs, direct)))
                for view in ("folder", "fuse"):
                    for state in ("cold", "warm"):
                        n = store.next_epoch()
                        if view == "folder":  # published ahead (untimed); the kernel knows none of it
                            store.cut(n)
                            assert n in publisher.step().published
                            base = folder
                        else:  # the lookup inside the timing cuts it, as a trainer's would
                            base = mnt
                        drop_caches(drop and state == "cold")
                        paths, total, seconds = first_read(pool, procs, base / f"epoch-{n}")
                        assert len(paths) == count, (view, len(paths), count)
                        samples[f"{view}_first_{state}"].append(harness.mb_per_s(total, seconds))
                    samples[f"{view}_repeat"].append(harness.mb_per_s(*timed_read(pool, procs, paths)))
                    store.retire(now=time.time() + 10_000)
                    publisher.step()
    finally:
        store.close()
        remove_tree(folder)
        if root != cache / "objects":
            lazy_unmount(root, any_kind=True)
            root.rmdir()
    med = {k: statistics.median(v) for k, v in samples.items()}
    row: dict[str, object] = {"size": name, "files": count, "procs": procs, "repeat": args.repeat}
    row |= {k: round(v) for k, v in med.items()}
    print(f"{name:>6} x{count:<5} procs={procs}  direct  cold {med['direct_cold']:6.0f}  warm "
          f"{med['direct_warm']:6.0f} MB/s", flush=True)
    for view in ("folder", "fuse"):
        ratios = {"first_cold": med[f"{view}_first_cold"] / med["direct_cold"],
                  "first_warm": med[f"{view}_first_warm"] / med["direct_warm"],
                  "repeat": med[f"{view}_repeat"] / med["direct_warm"]}
        row |= {f"ratio_{view}_{k}": round(v, 2) for k, v in ratios.items()}
        cells = "  ".join(f"{phase.replace('_', ' ')} {med[f'{view}_{phase}']:6.0f} ({harness.times(r)})"
                          for phase, r in ratios.items())
        print(f"{name:>6} x{count:<5} procs={procs}  {view:6} {cells} MB/s", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", type=Path, default=Path("/var/tmp/epochfs-bench"),
                    help=harness.DIR_HELP + " (default: /var/tmp/epochfs-bench)")
    ap.add_argument("--entries", default="10000,100000", help="epoch sizes to publish (0: skip)")
    ap.add_argument("--big", type=int, default=256, help="number of 4 MiB files (0: skip)")
    ap.add_argument("--small", type=int, default=4096, help="number of 64 KiB files (0: skip)")
    ap.add_argument("--procs", type=int, default=1, help="reader processes")
    ap.add_argument("--repeat", type=int, default=3, help="runs per cell; the median is reported")
    ap.add_argument("--wait", default="100000,400000",
                    help="epoch sizes for the trainer's wait: ask -> epoch-N visible (0: skip)")
    ap.add_argument("--growth", type=float, default=0.01,
                    help="new samples landing between two asks, as a share of the epoch")
    ap.add_argument("--no-fuse", action="store_true", help="skip the FUSE view's answer to the same ask")
    ap.add_argument("--schedule", action="store_true",
                    help="the wait in schedule mode: windows of the sampling order growing by --growth")
    ap.add_argument("--no-drop", action="store_true", help="never drop the page cache")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--plot", type=Path, help=harness.PLOT_HELP + ": the wait and the publish against the "
                    "entries, the reads' ratios to direct reads")
    args = ap.parse_args(argv)
    drop = not args.no_drop
    if drop and os.geteuid() != 0:
        ap.error("dropping the page cache needs root (or pass --no-drop)")
    sizes = [int(e) for e in args.entries.split(",") if int(e) > 0]
    classes = [(name, size, count) for name, size, count in (("4MiB", 4 << 20, args.big),
                                                            ("64KiB", 64 << 10, args.small)) if count > 0]
    if classes:
        harness.require("mfusepy")  # epochfs mount, for the FUSE view beside the folder view
    waits = [int(e) for e in args.wait.split(",") if int(e) > 0]
    if waits and not args.no_fuse:
        harness.require("mfusepy")
    results: dict[str, list[dict[str, object]]] = {"wait": [], "publish": [], "reads": []}
    with harness.work_dir(args.dir, prefix="epochfs-bench-folderview-") as scratch:
        for entries in waits:
            results["wait"].append(bench_wait(scratch, entries, args.repeat, args.growth, not args.no_fuse,
                                              args.schedule))
        for entries in sizes:
            results["publish"] += bench_publish(scratch, entries, args.repeat)
        for name, size, count in classes:
            results["reads"].append(bench_reads(args, scratch, name, size, count, drop))
    print(f"page cache dropped before cold phases: {'yes' if drop else 'no (--no-drop)'}; times and MB/s "
          f"are medians of {args.repeat} interleaved runs")
    if args.json:
        args.json.write_text(json.dumps({**results, "dropped": drop}, indent=2))
    if args.plot:
        from epochfs.benchmarks import _folderview_plot

        _folderview_plot.write(args.plot, {**results, "dropped": drop})
    return 0


if __name__ == "__main__":
    harness.entry(main, "folderview")
