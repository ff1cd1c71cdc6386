"""Example 3: data parallel across ranks: how EpochSampler (DistributedSampler semantics) splits an epoch.

    python examples/ddp_sampler.py                      # 2 processes, gloo, on a generated folder (CPU)
    python examples/ddp_sampler.py --files 10 --world 4

Every rank builds the same permutation of the epoch from (seed, epoch), pads it by repeating its head
until its length divides by the world size (or, with drop_last, cuts its tail), and rank r takes every
world-th index starting at r. ``set_epoch(n)`` changes the permutation, so each rank sees different
samples every epoch; forgetting it gives the same order every epoch. The script shows the split, the
padding and the reshuffle, then the same epoch through ``EpochLoader(partition="global")``, which does
this itself and equalises batch counts across ranks with one all_reduce.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader

from epochfs.torchclient import EpochDataset, EpochLoader, EpochSampler
from epochfs.torchclient.plainfolder import publish_epoch


def make_folder(root: Path, files: int, epochs: int) -> None:
    objects = root.parent / "objects"
    objects.mkdir(parents=True)
    for i in range(files):
        np.save(objects / f"s{i:02d}.npy", np.array([i], np.int64))
    for epoch in range(epochs):
        publish_epoch(root, epoch, {f"s{i:02d}.npy": objects / f"s{i:02d}.npy" for i in range(files)})


def rank_main(rank: int, world: int, root: str, store: str, epochs: int) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        for drop_last in (False, True):
            if rank == 0:
                print(f"\n== EpochSampler, drop_last={drop_last} ==", flush=True)
            for epoch in range(epochs):
                dataset = EpochDataset(root, epoch, decode="npy")
                sampler = EpochSampler(dataset, shuffle=True, seed=0, drop_last=drop_last,
                                       partition="global")  # rank/world: dist; one machine
                sampler.set_epoch(epoch)
                loader = DataLoader(dataset, batch_size=2, sampler=sampler)
                samples = [int(v) for batch in loader for v in batch[:, 0]]
                everyone: list[list[int]] = [[] for _ in range(world)]
                dist.all_gather_object(everyone, samples)
                if rank == 0:
                    counts = Counter(v for got in everyone for v in got)
                    repeated = sorted(v for v, c in counts.items() if c > 1)
                    dropped = sorted(set(range(len(dataset))) - set(counts))
                    print(f"epoch {epoch}: {len(dataset)} files over {world} ranks", flush=True)
                    for r, got in enumerate(everyone):
                        print(f"  rank {r}: samples {got}", flush=True)
                    print(f"  padding repeats {repeated or 'nothing'}; "
                          f"drop_last drops {dropped or 'nothing'}", flush=True)
        with EpochLoader(root, batch_size=2, num_workers=1, partition="global", decode="npy",
                         progress=None) as epoch_loader:
            got = [int(v) for batch in epoch_loader.epoch(0) for v in batch[:, 0]]
            everyone = [[] for _ in range(world)]
            dist.all_gather_object(everyone, got)
            if rank == 0:
                print("\n== EpochLoader(partition='global'), epoch 0: the same split, done for you ==")
                for r, samples in enumerate(everyone):
                    print(f"  rank {r}: samples {samples}", flush=True)
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=11, help="files per epoch (11 over 2 ranks pads one)")
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="epochfs-example3-") as tmp:
        root = Path(tmp) / "mnt"
        make_folder(root, args.files, args.epochs)
        for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            os.environ.pop(var, None)
        mp.spawn(rank_main, args=(args.world, str(root), str(Path(tmp) / "store"), args.epochs),
                 nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
