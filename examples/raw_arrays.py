"""Example 1: raw scientific arrays (.npy, float32, incompressible) at a high rate, over growing epochs.

    python examples/raw_arrays.py                      # on a generated plain folder (CPU, ~20 s)
    python examples/raw_arrays.py --root /mnt/epochfs  # on a real epochfs mount

Each sample is one .npy file, decoded in DataLoader worker processes by memory-mapping it (no copy
in the worker; the batch collation writes it once into shared memory that the training process maps).
The loop asks for epoch n at its start; on a mount that lookup cuts epoch n from whatever the sidecar
has fetched by then, so each epoch is larger than the one before. Every epoch prints the samples, the
MB/s and the seconds the training process waited for data (the number to keep near zero).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from epochfs.torchclient import EpochLoader, EpochStats
from epochfs.torchclient.plainfolder import publish_epoch


def make_folder(root: Path, *, samples: int, shape: tuple[int, ...], epochs: int) -> None:
    """A plain folder shaped like the mount: epoch n holds the first (n + 1)/epochs of the samples."""
    objects = root.parent / "objects"
    objects.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(samples):
        np.save(objects / f"{i:06d}.npy", rng.standard_normal(shape, dtype=np.float32))
    for epoch in range(epochs):
        count = samples * (epoch + 1) // epochs
        publish_epoch(root, epoch, {f"train/{i:06d}.npy": objects / f"{i:06d}.npy" for i in range(count)},
                      checksums=False)


def train(root: Path, *, epochs: int, batch_size: int, num_workers: int | None) -> list[EpochStats]:
    torch.manual_seed(0)
    # torch imports its compiler stack when the first optimizer is built (~2 s): do it before epoch 0,
    # so the first epoch's numbers measure the data, not torch's start-up.
    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.0)
    model: torch.nn.Module | None = None
    optimizer: torch.optim.Optimizer | None = None
    loader = EpochLoader(root, batch_size=batch_size, num_workers=num_workers, decode="npy",
                         on_epoch_end=lambda s: print(s.line(), flush=True))
    print(f"{loader.num_workers} worker processes, batch size {batch_size}, root {root}")
    with loader:
        for epoch in range(epochs):
            losses = []
            for batch in loader.epoch(epoch):  # batch: float32 tensor (B, *shape)
                features = batch.flatten(2).mean(dim=2) if batch.dim() > 2 else batch
                if model is None:
                    model = torch.nn.Sequential(torch.nn.Linear(features.shape[1], 64), torch.nn.ReLU(),
                                                torch.nn.Linear(64, 1))
                    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
                assert optimizer is not None
                loss = model(features).pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
            print(f"         loss {np.mean(losses):.4f}", flush=True)
    return loader.history


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, help="an epochfs mount (default: generate a plain folder)")
    parser.add_argument("--samples", type=int, default=192, help="samples to generate (default 192)")
    parser.add_argument("--shape", default="256x1024", help="float32 array shape per sample (default 1 MiB)")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=None, help="DataLoader workers (default: by CPUs)")
    args = parser.parse_args()
    shape = tuple(int(x) for x in args.shape.split("x"))
    with tempfile.TemporaryDirectory(prefix="epochfs-example1-") as tmp:
        root = args.root
        if root is None:
            root = Path(tmp) / "mnt"
            started = time.monotonic()
            make_folder(root, samples=args.samples, shape=shape, epochs=args.epochs)
            size = args.samples * int(np.prod(shape)) * 4 / 1e6
            print(f"generated {args.samples} samples ({size:.0f} MB) in {time.monotonic() - started:.1f}s "
                  f"under {root}")
        history = train(root, epochs=args.epochs, batch_size=args.batch_size, num_workers=args.workers)
    total = sum(s.bytes for s in history) / 1e6
    waited = sum(s.wait_seconds for s in history)
    print(f"total: {total:.0f} MB in {sum(s.seconds for s in history):.1f}s, waited {waited:.2f}s for data")


if __name__ == "__main__":
    main()
