"""The folder view's benchmark, the trainer's wait at an epoch boundary: a real ``epochfs publish``
over a store, the newest epoch being read by another process, the clock running from the ask
(a cut) until ``epoch-N/`` is visible; and, on the same store, the FUSE view's answer to the same
ask. Besides the wait: the publisher's CPU, peak memory and the disk an epoch adds.

Apart from :mod:`.folderview` (publishing and reads, and the command line) to keep each module
to one phase; :func:`bench_wait` is what ``--wait`` runs.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import statistics
import time
from pathlib import Path
from typing import Any

from epochfs.benchmarks import harness
from epochfs.benchmarks._folderview_schedule import admit_keys, schedule_store
from epochfs.benchmarks._folderview_stores import SHORT_ROOT, admit_more, tiny_store
from epochfs.sidecar.folderview import remove_tree
from epochfs.sidecar.store import Policy, Store


def cpu_and_waiting(pid: int) -> float:
    """Seconds process ``pid``'s threads ran on a CPU plus waited on a run queue for one
    (``/proc/<pid>/task/*/schedstat``): work in hand, whatever CPU it got."""
    total = 0
    for task in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError, ValueError):
            ran, waited, _ = Path(f"/proc/{pid}/task/{task}/schedstat").read_text().split()
            total += int(ran) + int(waited)
    return total / 1e9


def wait_idle(pid: int, *, quiet: float = 0.5, timeout: float = 600.0) -> float:
    """Block until process ``pid`` ran and waited for a CPU under 2% of ``quiet`` seconds (the
    publisher has done what it does ahead, whatever it does); the seconds waited. CPU time alone
    misread a loaded machine: a publisher starved of CPU with a tree of 1M links still to make used
    under 2% and was taken for idle, and that round's ask waited 68 s behind the links (load 20);
    its run-queue wait shows the work in hand. Fails the benchmark past ``timeout``: a round
    measured beside a busy publisher would be reported as if it were not."""
    started = time.perf_counter()
    last = cpu_and_waiting(pid)
    while time.perf_counter() - started < timeout:
        time.sleep(quiet)
        now = cpu_and_waiting(pid)
        if now - last < 0.02 * quiet:
            return time.perf_counter() - started
        last = now
    harness.fail(f"the publisher (pid {pid}) was still busy after {timeout:.0f} s")


def reader(folder: str, stop: Any) -> None:
    """Reads the newest epoch's entries (walk + readlink) until ``stop``: the trainer at work."""
    while not stop.is_set():
        with contextlib.suppress(OSError):
            base = os.path.join(folder, os.readlink(os.path.join(folder, "latest")))
            for dirpath, _dirs, files in os.walk(base):
                for name in files:
                    with contextlib.suppress(OSError):
                        os.readlink(os.path.join(dirpath, name))
                if stop.is_set():
                    return


def poll_until(path: Path, *, timeout: float = 600.0) -> float:
    """perf_counter() at the moment ``path`` exists (polled every 0.5 ms)."""
    deadline = time.perf_counter() + timeout
    while not os.path.exists(path):
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.0005)
    return time.perf_counter()


def epoch_disk(folder: Path, n: int) -> tuple[int, int]:
    """(bytes, inodes) epoch ``n`` adds to the volume: its manifest (``.epochfs/epoch-N.manifest``,
    ~66 bytes an entry), its folders, and its entries' inodes that the epoch before does not share
    (hard links to the same symlink count once)."""
    older: set[int] = set()
    if (folder / f"epoch-{n - 1}").is_dir():
        for dirpath, _dirs, files in os.walk(folder / f"epoch-{n - 1}"):
            older.update(os.lstat(os.path.join(dirpath, f)).st_ino for f in files)
    manifest = os.lstat(folder / ".epochfs" / f"epoch-{n}.manifest")
    total, inodes = manifest.st_blocks * 512, 1
    for dirpath, _dirs, files in os.walk(folder / f"epoch-{n}"):
        total += os.lstat(dirpath).st_blocks * 512
        inodes += 1
        for f in files:
            st = os.lstat(os.path.join(dirpath, f))
            if st.st_ino not in older:
                total += st.st_blocks * 512
                inodes += 1
    return total, inodes


def peak_rss(pid: int) -> int:
    """Process ``pid``'s peak resident memory (``VmHWM``), in bytes; 0 where /proc has none."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def spread(values: list[float]) -> str:
    """``median (min-max)``."""
    return f"{statistics.median(values):.3f} s ({min(values):.3f}-{max(values):.3f})"


def bench_wait(work: Path, entries: int, repeat: int, growth: float, fuse: bool,
               schedule: bool = False) -> dict[str, object]:
    """The trainer's wait at an epoch boundary: a real ``epochfs publish`` over a store of
    ``entries`` samples, the newest epoch being read by another process; each round ``growth`` x
    ``entries`` new samples land, the publisher is left alone until idle (it did what it does
    ahead), then the ask (``store.cut``: what ``POST /v1/cut`` does when the condition holds)
    and the clock runs until ``epoch-N/`` is visible. Then, on the same store, the FUSE view's
    answer to the same ask (a lookup of ``epoch-N``, and of one entry inside it). ``schedule``:
    a schedule-mode store, each round's new samples being the rest of the next window, the
    next window's facts measured ahead first as the sampler does after a cut (``ahead_s``)."""
    base = work / f"wait-{entries}"
    order: list[str] = []
    if schedule:
        store, order = schedule_store(base / "cache", entries, growth, repeat)
    else:
        store = tiny_store(base / "cache", entries)
        store.configure(Policy(capacity=1 << 40, keep_epochs=2, min_samples=1, in_use_seconds=1.0))
    folder = base / "view"
    store.cut(force=True)
    added = entries
    waits: list[float] = []
    cuts: list[float] = []  # the store's cut alone (the ask's part before the publisher wakes)
    aheads: list[float] = []  # schedule mode: the next window's facts measured after a cut
    cpu = 0.0
    rss = 0
    disk = (0, 0)
    ctx = mp.get_context("fork")
    try:
        argv = [*harness.EPOCHFS, "--log-level", "WARNING", "publish", "--cache", str(store.root),
                "--mount", str(folder), "--link-root", str(SHORT_ROOT)]
        with harness.running(argv, what="epochfs publish", ready=lambda: (folder / "latest").is_symlink(),
                             timeout=1200, interval=0.05, log=base / "publish.log") as proc:
            stop = ctx.Event()
            walker = ctx.Process(target=reader, args=(str(folder), stop), daemon=True)
            walker.start()
            try:
                wait_idle(proc.pid)
                cpu0 = harness.cpu_seconds(proc.pid)
                for _ in range(repeat):
                    if schedule:  # the rest of the next window: its cut condition holds
                        t1 = time.perf_counter()
                        store.process_cut_requests()  # the sampler's turn after a cut: measures ahead
                        aheads.append(time.perf_counter() - t1)
                        hi = store.schedule_window(store.next_epoch())[1]
                        admit_keys(store, order[added:hi])
                        added = max(added, hi)
                    else:
                        admit_more(store, added, max(1, int(entries * growth)))
                        added += max(1, int(entries * growth))
                    store.retire(now=time.time() + 10_000)
                    wait_idle(proc.pid)  # what the publisher does ahead, before anyone asks
                    n = store.next_epoch()
                    t0 = time.perf_counter()
                    assert store.cut(n) == n
                    cuts.append(time.perf_counter() - t0)
                    waits.append(poll_until(folder / f"epoch-{n}") - t0)
                    store.retire(now=time.time() + 10_000)
                    wait_idle(proc.pid)
                    disk = epoch_disk(folder, n)
                cpu = (harness.cpu_seconds(proc.pid) - cpu0) / repeat
                rss = peak_rss(proc.pid)
            finally:
                stop.set()
                walker.join(60)
    finally:
        store.close()
    row: dict[str, object] = {
        "entries": entries, "repeat": repeat, "growth": growth,
        "mode": "schedule" if schedule else "snapshot",
        "wait_s": round(statistics.median(waits), 3), "wait_min_s": round(min(waits), 3),
        "wait_max_s": round(max(waits), 3), "cut_s": round(statistics.median(cuts), 3),
        "cpu_per_epoch_s": round(cpu, 2), "cpu_per_entry_us": round(cpu / entries * 1e6, 1),
        "disk_mb_per_epoch": round(disk[0] / 1e6, 2), "inodes_per_epoch": disk[1],
        "publisher_peak_rss_mb": round(rss / 1e6)}
    mode = ", schedule mode" if schedule else ""
    print(f"wait    {entries:>7} entries{mode}: ask -> epoch-N visible {spread(waits)}; publisher CPU per "
          f"epoch {cpu:.2f} s ({row['cpu_per_entry_us']} us/entry), peak memory "
          f"{row['publisher_peak_rss_mb']} MB; disk per epoch {row['disk_mb_per_epoch']} MB, "
          f"{disk[1]} inodes", flush=True)
    print(f"wait    {entries:>7} entries{mode}: of which the store's cut (before the publisher wakes) "
          f"{spread(cuts)}", flush=True)
    if aheads:
        row["ahead_s"] = round(statistics.median(aheads), 3)
        print(f"wait    {entries:>7} entries{mode}: the next window's facts measured ahead, after a cut "
              f"(not in the wait) {spread(aheads)}", flush=True)
    if fuse:
        row |= fuse_wait(base, store.root, entries, repeat)
    remove_tree(base)
    return row


def fuse_wait(base: Path, cache: Path, entries: int, repeat: int) -> dict[str, object]:
    """The FUSE view's answer to the same ask: a lookup of ``epoch-N`` (it cuts), then of one
    entry inside (the epoch's tree built from the store)."""
    mnt = base / "mnt"
    mnt.mkdir()
    store = Store(cache)
    looked, entry = [], []
    try:
        with harness.running([*harness.EPOCHFS, "mount", "--cache", str(cache), "--mount", str(mnt),
                              "--link-root", str(cache / "objects")], what="epochfs mount",
                             ready=lambda: harness.mounted(mnt), interval=0.02, log=base / "mount.log",
                             unmount=(mnt,)):
            for _ in range(repeat):
                n = store.next_epoch()
                t0 = time.perf_counter()
                os.stat(mnt / f"epoch-{n}")
                looked.append(time.perf_counter() - t0)
                os.lstat(mnt / f"epoch-{n}" / "train" / "part-000" / "0000000.bin")
                entry.append(time.perf_counter() - t0)
                store.retire(now=time.time() + 10_000)
    finally:
        store.close()
    print(f"wait    {entries:>7} entries, FUSE view: ask (lookup) -> epoch-N {spread(looked)}, -> one "
          f"entry inside {spread(entry)}", flush=True)
    return {"fuse_wait_s": round(statistics.median(looked), 3),
            "fuse_wait_spread_s": [round(min(looked), 3), round(max(looked), 3)],
            "fuse_entry_s": round(statistics.median(entry), 3)}
