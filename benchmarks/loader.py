"""Loader benchmark: an epoch through the mount against the same loader on the node volume's files.

    python -m epochfs.benchmarks.loader                          # generated plain folder (~1.0x expected)
    python -m epochfs.benchmarks.loader --mount /mnt/epochfs --cache-objects /cache/objects --epochs 0 1 2
    sudo epochfs bench loader --args --sidecar                   # a real sidecar's mount (root)

For each epoch, one side runs ``EpochLoader`` over ``<mount>/epoch-N`` (paths through the mount:
lookups, symlinks, then the kernel reads the object files), the other runs the *same* DataLoader setup
(same workers, prefetch, batch size, decoder, order) over the object files those entries point to,
opened directly on the node volume. Both DataLoaders keep persistent workers across epochs, and the
order of the two sides alternates per read so neither always gets the warmer page cache; each epoch
is read ``--repeat`` times per side (epochs are immutable) and the medians are compared. Reported per
side: samples/s, MB/s, and CPU seconds per GB delivered of the training process (and of its workers).
The aim is at least 0.9x of direct from the second epoch on.

``--cache-objects DIR`` says where the object files are reachable directly when the symlink targets in
the mount are not (for example in another container): a target ``.../ab/abcdef...`` is read as
``DIR/ab/abcdef...``. Without it the symlink targets are opened as they are.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from epochfs.benchmarks import harness

try:
    import torch
    from torch.utils.data import DataLoader

    from epochfs.torchclient import EpochDataset, EpochLoader
    from epochfs.torchclient.decode import resolve_decoder
    from epochfs.torchclient.loader import _PathDataset, _PlanSampler
    from epochfs.torchclient.plainfolder import publish_epoch
    from epochfs.torchclient.sampler import epoch_indices
except ModuleNotFoundError as missing:
    harness.missing_module(missing)


@dataclass
class Side(harness.Rates):
    """One epoch read by one side (through the mount, or direct)."""

    side: str
    epoch: int
    round: int
    samples: int
    bytes: int
    seconds: float
    cpu_seconds: float
    worker_cpu_seconds: float

    @property
    def samples_per_s(self) -> float:
        return self.per_s(self.samples)

    @property
    def cpu_per_gb(self) -> float:
        return self.cpu_seconds / (self.bytes / 1e9) if self.bytes else 0.0

    @property
    def worker_cpu_per_gb(self) -> float:
        return self.worker_cpu_seconds / (self.bytes / 1e9) if self.bytes else 0.0


def keep_list(batch: list[Any]) -> list[Any]:
    return batch


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


def _drain(batches: Iterable[Any]) -> tuple[int, float]:
    """Consume every batch (touching nothing, like a GPU step that is not the bottleneck)."""
    return harness.timed(lambda: sum(len(batch) for batch in batches))


def generate(workdir: Path, *, samples: int, sample_bytes: int, epochs: int) -> Path:
    """A plain folder with the mount's layout: objects/<sid[:2]>/<sid> and growing epoch-N/ of symlinks."""
    objects = workdir / "objects"
    rng = np.random.default_rng(0)
    elements = max(1, sample_bytes // 4)
    names = []
    for i in range(samples):
        sid = f"{rng.integers(0, 2**63):016x}{i:08x}"
        (objects / sid[:2]).mkdir(parents=True, exist_ok=True)
        with open(objects / sid[:2] / sid, "wb") as handle:
            np.lib.format.write_array(handle, rng.standard_normal(elements, dtype=np.float32))
        names.append(sid)
    root = workdir / "mnt"
    for epoch in range(epochs):
        count = samples * (epoch + 1) // epochs
        publish_epoch(root, epoch, {f"train/{i:06d}.npy": objects / names[i][:2] / names[i]
                                    for i in range(count)}, checksums=False)
    return root


def write_remote(folder: Path, *, samples: int, sample_bytes: int) -> int:
    """A local "remote" of ``samples`` float32 .npy files under ``folder/train``; returns its bytes."""
    rng = np.random.default_rng(0)
    (folder / "train").mkdir(parents=True)
    total = 0
    for i in range(samples):
        path = folder / "train" / f"{i:06d}.npy"
        np.save(path, rng.standard_normal(max(1, sample_bytes // 4), dtype=np.float32))
        total += path.stat().st_size
    return total


def _fetched(status: Path, samples: int) -> bool:
    with contextlib.suppress(OSError, ValueError):
        return bool(json.loads(status.read_text())["samples"] >= samples)
    return False


@contextlib.contextmanager
def sidecar_mount(workdir: Path, *, samples: int, sample_bytes: int) -> Iterator[Path]:
    """Run ``epochfs sidecar`` over a generated file:// remote; yield the mount once every sample is in.

    Needs root (FUSE). The capacity holds the whole set, so every epoch lists every sample and the
    comparison is about the read path only.
    """
    remote, cache, mount = workdir / "remote", workdir / "cache", workdir / "mnt"
    total = write_remote(remote, samples=samples, sample_bytes=sample_bytes)
    mount.mkdir()
    with harness.running(
        [*harness.EPOCHFS, "sidecar", "--remote", f"file://{Path(remote).resolve()}",
         "--cache", str(cache), "--mount", str(mount), "--capacity", str(total * 2),
         "--health-port", str(harness.free_port())],
        what="sidecar (fetching the set)", log=workdir / "sidecar.log", timeout=300, interval=0.2,
        ready=lambda: _fetched(mount / ".epochfs" / "status.json", samples),  # the whole set fetched
        unmount=(mount, cache / "objects-ro"),
    ):
        print(f"sidecar: {samples} samples ({total / 1e6:.0f} MB) fetched into {cache}, mounted at {mount}")
        yield mount


def direct_paths(dataset: EpochDataset, cache_objects: Path | None) -> list[str]:
    """The object file behind each entry of the epoch, as the node volume names it."""
    paths = []
    for rel in dataset.files:
        entry = dataset.dir / rel
        target = Path(os.readlink(entry)) if entry.is_symlink() else entry
        if not target.is_absolute():
            target = (entry.parent / target).resolve()
        if cache_objects is not None:
            target = cache_objects / target.parent.name / target.name
        paths.append(str(target))
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", "--mount", dest="root", type=Path,
                        help="the epochfs mount (default: generate a plain folder with its layout)")
    parser.add_argument("--cache-objects", type=Path, help="where the object files are reachable directly")
    parser.add_argument("--epochs", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=None, help="DataLoader workers (default: by CPUs)")
    parser.add_argument("--decode", default="npy", help="npy (default), bytes, auto, npz, pt")
    parser.add_argument("--samples", type=int, default=384, help="generated samples (plain folder only)")
    parser.add_argument("--sample-mib", type=float, default=1.0, help="generated sample size in MiB")
    parser.add_argument("--repeat", type=int, default=3,
                        help="reads of each epoch per side, alternating sides (medians are reported)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--plot", type=Path, help=harness.PLOT_HELP + ": each epoch's ratio to direct")
    parser.add_argument("--sidecar", action="store_true",
                        help="run a real epochfs sidecar over generated samples and read through its mount "
                             "(root). Without it or --root, both sides read a generated plain folder: a "
                             "check of the harness (~1.0x), which is what `epochfs bench` runs unless "
                             "given `epochfs bench loader --args --sidecar`")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with harness.work_dir(prefix="epochfs-bench-loader-") as tmp:
        root = args.root
        if args.sidecar:
            with sidecar_mount(tmp, samples=args.samples,
                               sample_bytes=int(args.sample_mib * 2**20)) as mount:
                return run(mount, args)
        if root is None:
            root = generate(tmp, samples=args.samples, sample_bytes=int(args.sample_mib * 2**20),
                            epochs=max(args.epochs) + 1)
            print(f"generated {args.samples} samples of {args.sample_mib} MiB under {root} "
                  "(plain folder: both sides read the same files, so ~1.0x is expected)")
        return run(root, args)


def run(root: Path, args: argparse.Namespace) -> int:
    collate = None if args.decode == "npy" else keep_list
    extra: dict[str, Any] = {} if collate is None else {"collate_fn": collate}
    mount = EpochLoader(root, batch_size=args.batch_size, num_workers=args.workers, decode=args.decode,
                        shuffle=True, seed=0, progress=None, **extra)
    plan = _PlanSampler()
    direct = DataLoader(_PathDataset("", resolve_decoder(args.decode), None), batch_sampler=plan,
                        num_workers=mount.num_workers, **mount.dataloader_options)
    print(f"{mount.num_workers} workers, batch {args.batch_size}, decode {args.decode}, "
          f"pin_memory={mount.dataloader_options['pin_memory']}")
    table = harness.Table(("epoch", ">5"), ("round", ">5"), ("side", ">6"), ("files", ">6"), ("MB", ">8.1f"),
                          ("samples/s", ">10.0f"), ("MB/s", ">8.1f"), ("cpu s/GB", ">9.2f"),
                          ("worker cpu s/GB", ">16.2f"))
    print(table.header())
    results: list[Side] = []
    ratios: dict[int, float] = {}
    with mount:
        for number, epoch in enumerate(args.epochs):
            dataset = EpochDataset(root, epoch, decode=args.decode, progress=None)
            indices = epoch_indices(len(dataset), num_replicas=1, rank=0, shuffle=True, seed=0, epoch=epoch,
                                    drop_last=False)
            paths = direct_paths(dataset, args.cache_objects)
            plan.batches = [[paths[i] for i in indices[s:s + args.batch_size]]
                            for s in range(0, len(indices), args.batch_size)]
            nbytes = sum(dataset.sizes[i] for i in indices)
            for round_ in range(args.repeat):
                order = ("mount", "direct") if (number + round_) % 2 == 0 else ("direct", "mount")
                for side in order:
                    pids = mount.worker_pids if side == "mount" else lambda: _dataloader_pids(direct)
                    cpu0, workers0 = harness.self_cpu(), _workers_cpu(pids())
                    samples, seconds = _drain(mount.epoch(epoch) if side == "mount" else direct)
                    result = Side(side, epoch, round_, samples, nbytes, seconds, harness.self_cpu() - cpu0,
                                  _workers_cpu(pids()) - workers0)
                    results.append(result)
                    print(table.row(epoch, round_, side, len(dataset), nbytes / 1e6, result.samples_per_s,
                                    result.mb_per_s, result.cpu_per_gb, result.worker_cpu_per_gb), flush=True)
            medians = {side: statistics.median(r.mb_per_s for r in results
                                               if r.epoch == epoch and r.side == side)
                       for side in ("mount", "direct")}
            ratios[epoch] = medians["mount"] / medians["direct"]
            print(f"{epoch:>5} {'':>5} {'ratio':>6} median MB/s mount {medians['mount']:.1f} / direct "
                  f"{medians['direct']:.1f} = {harness.times(ratios[epoch])}", flush=True)
    iterator = getattr(direct, "_iterator", None)
    if iterator is not None:
        iterator._shutdown_workers()
    later = [ratio for epoch, ratio in ratios.items() if epoch != args.epochs[0]]
    if later:
        print(f"from the second epoch on: mount/direct {harness.times(statistics.geometric_mean(later))} "
              f"(geometric mean of the per-epoch median ratios; aim: >= 0.9x)")
    rows = [{**asdict(r), "mb_per_s": r.mb_per_s, "cpu_per_gb": r.cpu_per_gb} for r in results]
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    harness.write_plot(args.plot, "loader", rows)
    return 0


if __name__ == "__main__":
    harness.entry(main, "loader")
