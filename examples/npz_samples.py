"""Example 2: large .npz samples (one sample per file, several arrays per file), batched and prefetched.

    python examples/npz_samples.py                     # on a generated plain folder (CPU, ~30 s)
    python examples/npz_samples.py --root /mnt/epochfs --epoch 0

A common first attempt loads one .npz per training step in the training loop: the step then waits
for the read *and* the decompression, one file at a time, under the training process's GIL. The torch
way: the Dataset returns ONE sample (here a dict of tensors: video frames and their flow fields), and
the DataLoader does the rest: it batches samples (``default_collate`` turns a list of dicts into a
dict of stacked tensors), and with ``num_workers > 0`` worker processes decode the next batches while
the training step runs (``prefetch_factor`` batches ahead per worker). This script measures the same
epoch with 0 workers (decoding in the training process) and with N workers, with a simulated GPU step
of fixed duration (--step-ms), and prints the throughput of each: with workers, decoding overlaps the
step, so an epoch takes about max(decode / N, step) per batch instead of decode + step.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader

from epochfs.torchclient import EpochDataset, default_num_workers
from epochfs.torchclient.plainfolder import publish_epoch


def make_folder(root: Path, *, samples: int, frames: int, size: int) -> None:
    """Compressed .npz files: uint8 frames (T, 3, H, W) and float32 flow fields (T, 2, H, W)."""
    objects = root.parent / "objects"
    objects.mkdir(parents=True)
    rng = np.random.default_rng(0)
    grid = np.linspace(0, 6.28, size, dtype=np.float32)
    for i in range(samples):
        video = rng.integers(0, 255, (frames, 3, size, size), dtype=np.uint8)
        phase = rng.uniform(0, 6.28, (frames, 2, 1, 1)).astype(np.float32)
        flow = np.sin(grid[None, None, :, None] + phase) * np.cos(grid[None, None, None, :])
        np.savez_compressed(objects / f"clip{i:05d}.npz", frames=video, flow=flow.astype(np.float32),
                            label=np.array(i % 10))
    publish_epoch(root, 0, {f"clips/clip{i:05d}.npz": objects / f"clip{i:05d}.npz" for i in range(samples)},
                  checksums=False)


def train_step(batch: dict[str, torch.Tensor], step_seconds: float) -> None:
    """A stand-in for a GPU training step: the CPU is free while the GPU works for ``step_seconds``.

    (On a GPU the step is asynchronous device work; the training process only waits for it. A sleep
    models exactly that, and keeps the comparison honest on a machine with few cores.)
    """
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    time.sleep(step_seconds)


def measure(dataset: EpochDataset, *, workers: int, batch_size: int,
            step_seconds: float) -> list[tuple[float, float, float]]:
    """(samples/s, MB/s of files, seconds the loop waited for data) for two epochs of one DataLoader.

    The first epoch includes starting the worker processes; the second (persistent workers) is the
    steady state that every later epoch of a real run sees.
    """
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=workers,
                        prefetch_factor=4 if workers else None, persistent_workers=workers > 0)
    results = []
    for _ in range(2):
        waited = 0.0
        started = time.monotonic()
        mark = started
        for batch in loader:
            waited += time.monotonic() - mark
            assert batch["frames"].shape[0] <= batch_size and batch["frames"].dtype == torch.uint8
            train_step(batch, step_seconds)
            mark = time.monotonic()
        seconds = time.monotonic() - started
        results.append((len(dataset) / seconds, dataset.nbytes / 1e6 / seconds, waited))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, help="an epochfs mount (default: generate a plain folder)")
    parser.add_argument("--epoch", type=int, default=0)
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--size", type=int, default=128, help="frame height and width")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--workers", type=int, default=max(2, default_num_workers()))
    parser.add_argument("--step-ms", type=float, default=40.0, help="simulated GPU step per batch (ms)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="epochfs-example2-") as tmp:
        root = args.root
        if root is None:
            root = Path(tmp) / "mnt"
            make_folder(root, samples=args.samples, frames=args.frames, size=args.size)
        dataset = EpochDataset(root, args.epoch, decode="npz")
        sample = dataset[0]
        print(f"{len(dataset)} files, {dataset.nbytes / 1e6:.0f} MB; one sample = "
              + ", ".join(f"{k} {tuple(v.shape)} {v.dtype}" for k, v in sample.items()))
        for workers in (0, args.workers):
            results = measure(dataset, workers=workers, batch_size=args.batch_size,
                              step_seconds=args.step_ms / 1000)
            for epoch, (rate, mbps, waited) in enumerate(results):
                print(f"num_workers={workers} epoch {epoch}: {rate:6.1f} samples/s, {mbps:6.1f} MB/s of .npz "
                      f"files, waited {waited:.2f}s for data")


if __name__ == "__main__":
    main()
