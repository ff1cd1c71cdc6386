"""ArrayLoader benchmark: threads reading into reused batch tensors against worker-process loaders.

    python -m epochfs.benchmarks.arrayloader                  # direct reads; warm, and cold as root
    sudo python -m epochfs.benchmarks.arrayloader --sidecar   # also through a real sidecar mount
    sudo epochfs bench arrayloader --args --sidecar

For each sample size (``--sizes``, default 64 KiB, 1 MiB and 4 MiB float32 ``.npy`` files, ``--mb``
MB of them) three loaders read the same epoch of the same files, one after another:

* ``array``: :class:`~epochfs.torchclient.arrayloader.ArrayLoader` (threads, ``preadv`` into a ring
  of batch tensors, no worker processes);
* ``epoch``: :class:`~epochfs.torchclient.loader.EpochLoader` with ``decode="npy"`` (worker
  processes map each file, the DataLoader collates into shared memory);
* ``plain``: a plain ``torch.utils.data.DataLoader`` over the same paths, ``np.load`` in each worker,
  default collation, persistent workers: what one writes without epochfs.

Workers: ``--workers`` (default: ``default_num_workers()``, as EpochLoader picks them), threads:
``--threads`` (default: ``default_num_threads()``); pinned memory for all three when CUDA is
available. Each loader reads once to start (workers, ring buffers), then ``--repeat`` times with the
page cache warm, the loaders' order rotating per round, and the medians are reported; then, as root,
once each with the page cache dropped before the read (``sync; echo 3 > /proc/sys/vm/drop_caches``):
cold, the disk's rate. Reported per read: MB/s (file bytes, decimal), CPU seconds per GB of the
training process (ArrayLoader's threads included; the part in the kernel, where no GIL is held, too)
and of the worker processes, and their sum.

**Places.** ``direct``: a plain folder with the mount's layout whose entries are symlinks to the
files. With ``--sidecar`` (root), a real ``epochfs sidecar`` fetches the files from a ``file://``
remote and the loaders read through its mount (``mount``), and directly the same object files it
cached (``direct``). The batch is not touched (a GPU step that is not the bottleneck).

**To the GPU.** ``--device cuda`` times each epoch until its batches are on the GPU: the ArrayLoader
with ``device="cuda"`` (its copies on a side stream, from its pinned ring), the other two with each
batch copied from pinned memory (``.to(device, non_blocking=True)``, as a training loop does), and
the epoch ends with the device synchronised. The rate a GPU step then sees, with the copies' CPU
in the training process's share.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from epochfs.benchmarks import harness

try:
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, Dataset

    from epochfs.torchclient import EpochDataset, EpochLoader
    from epochfs.torchclient.arrayloader import ArrayLoader, default_num_threads
    from epochfs.torchclient.loader import default_num_workers
    from epochfs.torchclient.plainfolder import publish_epoch
except ModuleNotFoundError as missing:
    harness.missing_module(missing)

LOADERS = ("array", "epoch", "plain")
DEFAULT_BATCH = {64 << 10: 128, 1 << 20: 32, 4 << 20: 16}


@dataclass
class Read(harness.Rates):
    """One epoch read by one loader."""

    size: int
    place: str
    cache: str
    loader: str
    round: int
    samples: int
    bytes: int
    seconds: float
    cpu_seconds: float
    system_seconds: float
    """The part of ``cpu_seconds`` spent in the kernel (copies from the page cache: no GIL held)."""
    worker_cpu_seconds: float

    def per_gb(self, seconds: float) -> float:
        return seconds / (self.bytes / 1e9)


class NpyFiles(Dataset[Any]):
    """The plain baseline: ``np.load`` of a path in a worker, one tensor per sample."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.from_numpy(np.load(self.paths[index]))


def _dataloader_pids(loader: DataLoader[Any]) -> list[int]:
    """The pids of a plain DataLoader's (persistent) worker processes, once started (torch's
    private state: it has no public way to them)."""
    return [w.pid for w in getattr(getattr(loader, "_iterator", None), "_workers", [])]


def _workers_cpu(pids: list[int]) -> float:
    """CPU seconds so far of the worker processes ``pids``, from /proc."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):  # a worker gone
            total += harness.cpu_seconds(pid, children=False)
    return total


def _system_cpu() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime


def drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def write_samples(folder: Path, *, count: int, sample_bytes: int) -> list[Path]:
    """``count`` float32 ``.npy`` files of random (incompressible) values."""
    rng = np.random.default_rng(sample_bytes)
    folder.mkdir(parents=True)
    paths = []
    for i in range(count):
        path = folder / f"{i:06d}.npy"
        np.save(path, rng.standard_normal(sample_bytes // 4, dtype=np.float32))
        paths.append(path)
    return paths


def plain_folder(root: Path, targets: dict[str, Path]) -> Path:
    publish_epoch(root, 0, targets, checksums=False)
    return root


def _fetched(status: Path, samples: int) -> bool:
    with contextlib.suppress(OSError, ValueError):
        return bool(json.loads(status.read_text())["samples"] >= samples)
    return False


@contextlib.contextmanager
def sidecar_mount(workdir: Path, remote: Path, samples: int, nbytes: int) -> Iterator[Path]:
    """A real ``epochfs sidecar`` over ``file://remote``, yielded once every sample is cached."""
    cache, mount = workdir / "cache", workdir / "mnt"
    mount.mkdir(parents=True)
    with harness.running(
        [*harness.EPOCHFS, "sidecar", "--remote", f"file://{Path(remote).resolve()}", "--cache", str(cache),
         "--mount", str(mount), "--capacity", str(nbytes * 2), "--health-port", str(harness.free_port())],
        what="sidecar (fetching the set)", log=workdir / "sidecar.log", timeout=600, interval=0.2,
        ready=lambda: _fetched(mount / ".epochfs" / "status.json", samples),
        unmount=(mount, cache / "objects-ro"),
    ):
        yield mount


def _targets(mount: Path) -> dict[str, Path]:
    """The object file behind each entry of the mount's epoch 0 (what the kernel reads)."""
    dataset = EpochDataset(mount, 0, progress=None)
    out = {}
    for rel in dataset.files:
        entry = dataset.dir / rel
        out[rel] = Path(os.path.realpath(entry))
    return out


class Bench:
    """The three loaders over one root, and their reads."""

    def __init__(self, root: Path, args: argparse.Namespace, size: int, place: str) -> None:
        self.size, self.place = size, place
        batch = args.batch_size or DEFAULT_BATCH.get(size, 32)
        self.workers = args.workers if args.workers is not None else default_num_workers()
        self.threads = args.threads if args.threads is not None else default_num_threads()
        dataset = EpochDataset(root, 0, progress=None)
        self.files, self.bytes = len(dataset), dataset.nbytes
        paths = [str(dataset.path(i)) for i in range(len(dataset))]
        pin = torch.cuda.is_available()
        self.device = torch.device(args.device) if args.device else None
        self.array = ArrayLoader(root, batch_size=batch, num_threads=self.threads, progress=None,
                                 report=False, format="npy", device=self.device)
        self.epoch = EpochLoader(root, batch_size=batch, num_workers=self.workers, decode="npy",
                                 progress=None, report=False)
        self.plain = DataLoader(NpyFiles(paths), batch_size=batch, shuffle=True, num_workers=self.workers,
                                persistent_workers=self.workers > 0, pin_memory=pin)
        self.batch = batch

    def read(self, name: str, cache: str, round_: int) -> Read:
        batches: Any = {"array": lambda: self.array.epoch(0), "epoch": lambda: self.epoch.epoch(0),
                        "plain": lambda: self.plain}[name]()
        pids: Callable[[], list[int]] = {"epoch": self.epoch.worker_pids,
                                         "plain": lambda: _dataloader_pids(self.plain)}.get(name, list)
        cpu0, system0, workers0 = harness.self_cpu(), _system_cpu(), _workers_cpu(pids())
        samples, seconds = harness.timed(lambda: self._consume(batches))
        cpu, system = harness.self_cpu() - cpu0, _system_cpu() - system0
        workers = _workers_cpu(pids()) - workers0
        return Read(self.size, self.place, cache, name, round_, samples, self.bytes, seconds, cpu, system,
                    workers)

    def _consume(self, batches: Any) -> int:
        """Samples in ``batches``, each batch on ``--device`` when one is given (the device synchronised
        at the end, so the copies are in the time)."""
        samples = 0
        for batch in batches:
            if self.device is not None and batch.device != self.device:
                batch = batch.to(self.device, non_blocking=True)
            samples += len(batch)
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return samples

    def close(self) -> None:
        self.array.close()
        self.epoch.close()
        iterator = getattr(self.plain, "_iterator", None)
        if iterator is not None:
            iterator._shutdown_workers()


TABLE = harness.Table(("size", ">7s"), ("place", "6s"), ("cache", "5s"), ("loader", "6s"), ("round", ">5"),
                      ("MB/s", ">8.0f"), ("train cpu s/GB", ">14.3f"), ("of which sys", ">12.3f"),
                      ("worker cpu s/GB", ">15.3f"), ("total cpu s/GB", ">14.3f"))


def _size_name(size: int) -> str:
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


def measure(root: Path, args: argparse.Namespace, size: int, place: str, results: list[Read]) -> None:
    bench = Bench(root, args, size, place)
    print(f"-- {_size_name(size)} x {bench.files} files ({bench.bytes / 1e6:.0f} MB), {place}: "
          f"batch {bench.batch}, {bench.threads} threads / {bench.workers} workers, "
          f"batches to {bench.device or 'host memory'}", flush=True)
    try:
        for name in LOADERS:  # start: workers, ring buffers; the page cache warmed
            bench.read(name, "start", 0)
        for round_ in range(args.repeat):
            order = LOADERS[round_ % 3:] + LOADERS[:round_ % 3]
            for name in order:
                result = bench.read(name, "warm", round_)
                results.append(result)
                print(_row(result), flush=True)
        if args.cold:
            for name in LOADERS:
                drop_caches()
                result = bench.read(name, "cold", 0)
                results.append(result)
                print(_row(result), flush=True)
    finally:
        bench.close()


def _row(r: Read) -> str:
    return TABLE.row(_size_name(r.size), r.place, r.cache, r.loader, r.round, r.mb_per_s,
                     r.per_gb(r.cpu_seconds), r.per_gb(r.system_seconds), r.per_gb(r.worker_cpu_seconds),
                     r.per_gb(r.cpu_seconds + r.worker_cpu_seconds))


def summary(results: list[Read]) -> list[str]:
    """Per size, place and cache: median MB/s and total CPU s/GB of each loader, ratios to plain."""
    lines = []
    keys = sorted({(r.size, r.place, r.cache) for r in results}, key=lambda k: (k[0], k[1], k[2] != "warm"))
    for size, place, cache in keys:
        mine = {name: [r for r in results if (r.size, r.place, r.cache, r.loader) == (size, place, cache,
                                                                                          name)]
                for name in LOADERS}
        rate = {n: statistics.median(r.mb_per_s for r in rs) for n, rs in mine.items() if rs}
        cpu = {n: statistics.median(r.per_gb(r.cpu_seconds + r.worker_cpu_seconds) for r in rs)
               for n, rs in mine.items() if rs}
        train = {n: statistics.median(r.per_gb(r.cpu_seconds) for r in rs) for n, rs in mine.items() if rs}
        if "plain" not in rate:
            continue
        parts = [f"{n} {rate[n]:.0f} MB/s ({harness.times(rate[n] / rate['plain'])}), {cpu[n]:.2f} cpu s/GB "
                 f"({train[n]:.2f} in training)" for n in LOADERS if n in rate]
        lines.append(f"{_size_name(size):>7} {place:6} {cache:5} " + "; ".join(parts))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64 << 10, 1 << 20, 4 << 20],
                        help="sample sizes in bytes (default 64 KiB, 1 MiB, 4 MiB)")
    parser.add_argument("--mb", type=float, default=512, help="MB of samples per size (default 512)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="batch size (default by size: 128 for 64 KiB, 32 for 1 MiB, 16 for 4 MiB)")
    parser.add_argument("--threads", type=int, default=None, help="ArrayLoader threads (default by CPUs)")
    parser.add_argument("--workers", type=int, default=None, help="DataLoader workers (default by CPUs)")
    parser.add_argument("--repeat", type=int, default=3, help="warm reads per loader (medians reported)")
    parser.add_argument("--cold", action=argparse.BooleanOptionalAction, default=os.geteuid() == 0,
                        help="also read with the page cache dropped (root; default when root)")
    parser.add_argument("--sidecar", action="store_true",
                        help="also read through a real epochfs sidecar's mount (root, FUSE)")
    parser.add_argument("--device", default=None,
                        help="copy every batch to this device (cuda, cuda:N) inside the timed epoch")
    parser.add_argument("--json", type=Path, help="also write every read here")
    parser.add_argument("--plot", type=Path, help=harness.PLOT_HELP + ": each loader's ratio to plain")
    args = parser.parse_args(argv)
    if (args.cold or args.sidecar) and os.geteuid() != 0:
        harness.fail("--cold and --sidecar need root (dropping the page cache, mounting)")
    if args.device:
        try:
            kind = torch.device(args.device).type
        except RuntimeError as exc:
            harness.fail(f"--device {args.device}: {exc}")
        if kind not in ("cpu", "cuda"):  # the ArrayLoader's devices, and the timing syncs CUDA only
            harness.fail(f"--device {args.device}: only cpu and cuda devices are supported")
        if kind == "cuda" and not torch.cuda.is_available():
            harness.fail(f"--device {args.device}: CUDA is not available here")
    torch.set_num_threads(1)
    results: list[Read] = []
    print(TABLE.header(), flush=True)
    with harness.work_dir(prefix="epochfs-bench-arrayloader-") as tmp:
        for size in args.sizes:
            count = max(1, int(args.mb * 1e6) // size)
            remote = tmp / f"remote-{size}"
            paths = write_samples(remote / "train", count=count, sample_bytes=size)
            if args.sidecar:
                nbytes = sum(p.stat().st_size for p in paths)
                with sidecar_mount(tmp / f"sidecar-{size}", remote, count, nbytes) as mount:
                    measure(mount, args, size, "mount", results)
                    direct = plain_folder(tmp / f"direct-{size}", _targets(mount))
                    measure(direct, args, size, "direct", results)
            else:
                direct = plain_folder(tmp / f"direct-{size}", {f"train/{p.name}": p for p in paths})
                measure(direct, args, size, "direct", results)
    print("\nmedians: MB/s (ratio to the plain DataLoader), CPU s/GB of the training process and its workers "
          "(of the training process alone):")
    for line in summary(results):
        print(line)
    rows = [{**asdict(r), "mb_per_s": r.mb_per_s} for r in results]
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    harness.write_plot(args.plot, "arrayloader", rows)
    return 0


if __name__ == "__main__":
    harness.entry(main, "arrayloader")
