"""Images benchmark: decoded images/s through the mount against the same DataLoader on local files.

    sudo python -m epochfs.benchmarks.images                   # a real sidecar's mount (root + FUSE)
    python -m epochfs.benchmarks.images --plain                # a plain folder with the mount's layout
    sudo epochfs bench images --args --images 2000 --repeat 5

``--images`` PNG and JPEG files (half each, ``--side`` pixels square, smooth content with some noise,
as photos compress) are generated in class folders (``train/c<k>/<n>.png|jpg``, the ImageFolder
layout) under a local folder. One side runs :class:`~epochfs.torchclient.loader.EpochLoader` with
``decode="image"`` (Pillow, or torchvision.io where a working torchvision is installed) over
``<mount>/epoch-0``: a real ``epochfs sidecar`` fetched the folder as a ``file://`` remote, and each
read goes through the mount (lookups, symlinks, then the kernel reads the object file). The baseline
runs the *same* DataLoader (same decoder, workers, prefetch, batch size, collate and order) over the
generated files in the local folder, where they were written. Both keep persistent workers; each
side reads the epoch once to start its workers and warm the page cache, then ``--repeat`` rounds,
the two sides' order alternating per round. Reported: images/s per read, each round's ratio (mount
over local, the two reads next to each other), their median and range. Aim: at least 0.95x.

``--plain`` (the default when not root or without /dev/fuse) publishes the generated files as a plain
folder with the mount's layout instead (symlinks, no FUSE): the torch client's own cost only.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from epochfs.benchmarks import harness

try:
    import numpy as np
    import torch
    from PIL import Image
    from torch.utils.data import DataLoader

    from epochfs.torchclient import EpochDataset, EpochLoader
    from epochfs.torchclient.decode import resolve_decoder
    from epochfs.torchclient.loader import _PathDataset, _PlanSampler
    from epochfs.torchclient.plainfolder import publish_epoch
    from epochfs.torchclient.sampler import epoch_indices
except ModuleNotFoundError as missing:
    harness.missing_module(missing)

SIDES = ("mount", "local")


@dataclass
class Read(harness.Rates):
    """One read of the epoch by one side."""

    side: str
    round: int
    images: int
    bytes: int
    seconds: float

    @property
    def images_per_s(self) -> float:
        return self.per_s(self.images)


def image_bytes(seed: int, side: int, kind: str) -> bytes:
    """A ``side`` x ``side`` RGB image, smooth (an 8x8 grid of colours, upscaled) plus some noise."""
    rng = np.random.default_rng(seed)
    coarse = Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8), "RGB")
    smooth = np.asarray(coarse.resize((side, side), Image.Resampling.BILINEAR), dtype=np.int16)
    noisy = np.clip(smooth + rng.integers(-12, 13, smooth.shape), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(noisy, "RGB").save(out, format="PNG" if kind == "png" else "JPEG", quality=90)
    return out.getvalue()


def generate(folder: Path, *, images: int, side: int, classes: int = 10) -> dict[str, Path]:
    """``images`` files under ``folder/train/c<k>/``, PNG and JPEG alternating; relative path -> file."""
    files = {}
    for i in range(images):
        kind = "png" if i % 2 == 0 else "jpg"
        relative = f"train/c{i % classes}/{i:06d}.{kind}"
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(image_bytes(i, side, kind))
        files[relative] = path
    return files


def _fetched(status: Path, count: int) -> bool:
    with contextlib.suppress(OSError, ValueError):
        return bool(json.loads(status.read_text())["samples"] >= count)
    return False


@contextlib.contextmanager
def sidecar_mount(work: Path, remote: Path, count: int, nbytes: int) -> Iterator[Path]:
    """``epochfs sidecar`` over ``file://remote``; yields the mount once every image is cached."""
    cache, mount = work / "cache", work / "mnt"
    mount.mkdir()
    with harness.running(
        [*harness.EPOCHFS, "sidecar", "--remote", f"file://{remote}", "--cache", str(cache),
         "--mount", str(mount), "--capacity", str(max(nbytes * 2, 64 << 20)),
         "--health-port", str(harness.free_port())],
        what="sidecar (fetching the images)", log=work / "sidecar.log", timeout=300, interval=0.2,
        ready=lambda: _fetched(mount / ".epochfs" / "status.json", count),
        unmount=(mount, cache / "objects-ro"),
    ):
        yield mount


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=2000, help="generated images (half PNG, half JPEG)")
    parser.add_argument("--side", type=int, default=128, help="image width and height in pixels")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=None, help="DataLoader workers (default: by CPUs)")
    parser.add_argument("--repeat", type=int, default=5, help="measured rounds (each reads both sides)")
    parser.add_argument("--plain", action="store_true",
                        help="a plain folder with the mount's layout instead of a real sidecar's mount")
    parser.add_argument("--json", type=Path, help="also write every read and the summary here")
    args = parser.parse_args(argv)
    if args.images < 1 or args.repeat < 1:
        parser.error("--images and --repeat must be at least 1")
    plain = args.plain or os.geteuid() != 0 or not os.path.exists("/dev/fuse")
    torch.set_num_threads(1)
    with harness.work_dir(prefix="epochfs-bench-images-") as work:
        remote = work / "remote"
        files, seconds = harness.timed(lambda: generate(remote, images=args.images, side=args.side))
        nbytes = sum(p.stat().st_size for p in files.values())
        print(f"generated {len(files)} images ({args.side}x{args.side}, PNG and JPEG, "
              f"{nbytes / 1e6:.1f} MB) in {seconds:.1f}s under {remote}")
        if plain:
            root = work / "plain"
            publish_epoch(root, 0, files, checksums=False)
            print(f"plain folder with the mount's layout at {root} (no FUSE: ~1.0x expected)")
            return run(root, remote, args)
        with sidecar_mount(work, remote, len(files), nbytes) as mount:
            print(f"sidecar: {len(files)} images fetched, mounted at {mount}")
            return run(mount, remote, args)


def run(root: Path, local: Path, args: argparse.Namespace) -> int:
    mount = EpochLoader(root, batch_size=args.batch_size, num_workers=args.workers, decode="image",
                        shuffle=True, seed=0, progress=None, report=False)
    dataset = EpochDataset(root, 0, decode="image", progress=None)
    order = epoch_indices(len(dataset), num_replicas=1, rank=0, shuffle=True, seed=0, epoch=0,
                          drop_last=False)
    plan = _PlanSampler()
    plan.batches = [[str(local / dataset.files[i]) for i in order[s:s + args.batch_size]]
                    for s in range(0, len(order), args.batch_size)]
    baseline = DataLoader(_PathDataset("", resolve_decoder("image"), None), batch_sampler=plan,
                          num_workers=mount.num_workers, **mount.dataloader_options)
    print(f"{mount.num_workers} workers, batch {args.batch_size}, decode image, {len(dataset)} images "
          f"({dataset.nbytes / 1e6:.1f} MB) through {root} against the same files in {local}")

    def read(side: str) -> tuple[int, float]:
        batches = mount.epoch(0) if side == "mount" else baseline
        return harness.timed(lambda: sum(len(batch) for batch in batches))

    table = harness.Table(("round", ">5"), ("side", "<6"), ("images", ">7"), ("images/s", ">9.0f"),
                          ("MB/s", ">7.1f"))
    reads: list[Read] = []
    ratios: list[float] = []
    try:
        for side in SIDES:  # start the workers, warm the page cache and the kernel's entries
            images, _ = read(side)
            if images != len(dataset):
                harness.fail(f"{side}: read {images} images of {len(dataset)}")
        print(table.header())
        for round_ in range(args.repeat):
            rates = {}
            for side in (SIDES if round_ % 2 == 0 else SIDES[::-1]):
                images, seconds = read(side)
                result = Read(side, round_, images, dataset.nbytes, seconds)
                reads.append(result)
                rates[side] = result.images_per_s
                print(table.row(round_, side, images, result.images_per_s, result.mb_per_s), flush=True)
            ratios.append(rates["mount"] / rates["local"])
            print(f"{round_:>5} ratio  mount/local {harness.times(ratios[-1])}", flush=True)
    finally:
        mount.close()
        dataset.release()
    iterator = getattr(baseline, "_iterator", None)
    if iterator is not None:
        iterator._shutdown_workers()
    medians = {side: statistics.median(r.images_per_s for r in reads if r.side == side) for side in SIDES}
    ratio = statistics.median(ratios)
    print(f"median images/s: mount {medians['mount']:.0f}, local {medians['local']:.0f}; mount/local "
          f"{harness.times(ratio)} (median of {len(ratios)} rounds, range {harness.times(min(ratios))}"
          f"-{harness.times(max(ratios))}; aim: >= 0.95x)")
    if args.json:
        args.json.write_text(json.dumps({
            "reads": [{**asdict(r), "images_per_s": r.images_per_s} for r in reads],
            "ratios": ratios, "ratio": ratio, "median_images_per_s": medians,
            "workers": mount.num_workers, "images": len(dataset), "side": args.side,
        }, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
