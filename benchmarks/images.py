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
over local, the two reads next to each other), their median and range. Aim: at least 0.95x. Beside
each read, the CPU seconds its DataLoader workers and the sidecar's processes (supervisor, sampler,
FUSE server) spent meanwhile: on a small node those share the CPUs, so what the sidecar burns per
read is where a gap that the workers' own CPU does not show comes from; the sidecar's idle rate,
measured for ``--idle`` seconds before the rounds, is taken off ("above idle").

``--plain`` (the default when not root or without /dev/fuse) publishes the generated files as a plain
folder with the mount's layout instead (symlinks, no FUSE): the torch client's own cost only.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import shutil
import statistics
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

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
    worker_cpu: float = 0.0
    """CPU seconds of this side's DataLoader workers during the read."""
    sidecar_cpu: float = float("nan")
    """CPU seconds of the sidecar's processes during the read (nan: no sidecar, ``--plain``)."""
    sidecar_extra: float = float("nan")
    """``sidecar_cpu`` less what the sidecar spends idle in as long (its rate measured before the
    rounds): what this read cost the sidecar."""

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


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants now, from /proc (the sidecar's supervisor and its children)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [pid]
    while todo:
        tree.append(todo.pop())
        todo.extend(children.get(tree[-1], ()))
    return tree


def cpu_of(pids: list[int]) -> float:
    """CPU seconds so far of ``pids`` (without their reaped children; a process gone counts 0)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += harness.cpu_seconds(pid, children=False)
    return total


def idle_rate(pids: list[int], seconds: float) -> float:
    """CPU seconds per second that ``pids`` spend while nothing reads: measured over ``seconds`` of
    idling (a measurement, not a wait for anything)."""
    before, started = cpu_of(pids), time.monotonic()
    time.sleep(seconds)
    return (cpu_of(pids) - before) / (time.monotonic() - started)


def _workers(loader: DataLoader[object]) -> list[int]:
    """The pids of a plain DataLoader's (persistent) worker processes, once started (torch's
    private state: it has no public way to them)."""
    return [w.pid for w in getattr(getattr(loader, "_iterator", None), "_workers", [])]


def _fetched(status: Path, count: int) -> bool:
    with contextlib.suppress(OSError, ValueError):
        return bool(json.loads(status.read_text())["samples"] >= count)
    return False


@contextlib.contextmanager
def sidecar_mount(work: Path, remote: Path, count: int, nbytes: int) -> Iterator[tuple[Path, int]]:
    """``epochfs sidecar`` over ``file://remote``; yields the mount and the sidecar's pid once every
    image is cached.

    The sidecar runs in a session of its own (``setsid``, which execs it: the pid is the sidecar's),
    as in a pod, where it is another container: in the benchmark's session its supervisor shared
    the autogroup (the CPU share the kernel gives a session) of the DataLoader workers, and on a
    busy machine its wake-ups moved the workers' share more than the mount moved their speed
    (docs/performance.md, "Images")."""
    cache, mount = work / "cache", work / "mnt"
    mount.mkdir()
    own_session = ["setsid"] if shutil.which("setsid") else []
    with harness.running(
        [*own_session, *harness.EPOCHFS, "sidecar", "--remote", f"file://{Path(remote).resolve()}",
         "--cache", str(cache), "--mount", str(mount), "--capacity", str(max(nbytes * 2, 64 << 20)),
         "--health-port", str(harness.free_port())],
        what="sidecar (fetching the images)", log=work / "sidecar.log", timeout=300, interval=0.2,
        ready=lambda: _fetched(mount / ".epochfs" / "status.json", count),
        unmount=(mount, cache / "objects-ro"),
    ) as proc:
        yield mount, proc.pid


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
    parser.add_argument("--idle", type=float, default=3.0,
                        help="seconds to measure the sidecar's idle CPU rate before the rounds")
    parser.add_argument("--json", type=Path, help="also write every read and the summary here")
    parser.add_argument("--plot", type=Path, help=harness.PLOT_HELP + ": mount / local images/s, median "
                        "and each round, and the workers' CPU per read")
    args = parser.parse_args(argv)
    if args.images < 1 or args.repeat < 1:
        parser.error("--images and --repeat must be at least 1")
    if not args.idle > 0:
        parser.error("--idle must be a positive number of seconds")
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
        with sidecar_mount(work, remote, len(files), nbytes) as (mount, sidecar):
            print(f"sidecar: {len(files)} images fetched, mounted at {mount}")
            return run(mount, remote, args, sidecar=sidecar)


def run(root: Path, local: Path, args: argparse.Namespace, *, sidecar: int | None = None) -> int:
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
                          ("MB/s", ">7.1f"), ("worker cpu s", ">12.2f"), ("sidecar cpu s", ">13.2f"),
                          ("above idle", ">10.3f"))
    reads: list[Read] = []
    ratios: list[float] = []
    try:
        for side in SIDES:  # start the workers, warm the page cache and the kernel's entries
            images, _ = read(side)
            if images != len(dataset):
                harness.fail(f"{side}: read {images} images of {len(dataset)}")
        workers = {"mount": mount.worker_pids(), "local": _workers(baseline)}
        sidecar_pids = process_tree(sidecar) if sidecar is not None else []
        idle = idle_rate(sidecar_pids, args.idle) if sidecar_pids else float("nan")
        if sidecar_pids:
            print(f"sidecar idle: {idle * 100:.1f}% of a CPU (its {len(sidecar_pids)} processes, "
                  f"over {args.idle:g}s)")
        print(table.header())
        for round_ in range(args.repeat):
            rates = {}
            for side in (SIDES if round_ % 2 == 0 else SIDES[::-1]):
                worker0, sidecar0 = cpu_of(workers[side]), cpu_of(sidecar_pids)
                images, seconds = read(side)
                spent = cpu_of(sidecar_pids) - sidecar0 if sidecar_pids else float("nan")
                result = Read(side, round_, images, dataset.nbytes, seconds, cpu_of(workers[side]) - worker0,
                              spent, spent - idle * seconds)
                reads.append(result)
                rates[side] = result.images_per_s
                print(table.row(round_, side, images, result.images_per_s, result.mb_per_s, result.worker_cpu,
                                result.sidecar_cpu, result.sidecar_extra), flush=True)
            ratios.append(rates["mount"] / rates["local"])
            print(f"{round_:>5} ratio  mount/local {harness.times(ratios[-1])}", flush=True)
    finally:
        mount.close()
        dataset.release()
    iterator = getattr(baseline, "_iterator", None)
    if iterator is not None:
        iterator._shutdown_workers()
    medians = {side: statistics.median(r.images_per_s for r in reads if r.side == side) for side in SIDES}
    cpu = {side: {what: statistics.median(getattr(r, what) for r in reads if r.side == side)
                  for what in ("worker_cpu", "sidecar_cpu", "sidecar_extra")} for side in SIDES}
    ratio = statistics.median(ratios)
    print(f"median images/s: mount {medians['mount']:.0f}, local {medians['local']:.0f}; mount/local "
          f"{harness.times(ratio)} (median of {len(ratios)} rounds, range {harness.times(min(ratios))}"
          f"-{harness.times(max(ratios))}; aim: >= 0.95x)")
    line = "median CPU s per read: workers " + ", ".join(f"{s} {cpu[s]['worker_cpu']:.2f}" for s in SIDES)
    if sidecar is not None:
        line += "; sidecar " + ", ".join(f"{s} {cpu[s]['sidecar_cpu']:.2f}" for s in SIDES)
        extra = cpu["mount"]["sidecar_extra"]
        line += (f"; sidecar above idle: mount {extra:.3f} ({extra / len(dataset) * 1e6:.0f} us per image), "
                 f"local {cpu['local']['sidecar_extra']:.3f}")
    print(line)
    summary = _no_nan({
        "reads": [{**asdict(r), "images_per_s": r.images_per_s} for r in reads],
        "ratios": ratios, "ratio": ratio, "median_images_per_s": medians, "median_cpu_seconds": cpu,
        "sidecar_idle_cpu_rate": idle,
        "workers": mount.num_workers, "images": len(dataset), "side": args.side, "plain": sidecar is None,
    })
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    if args.plot:
        from epochfs.benchmarks import _images_plot

        _images_plot.write(args.plot, [summary])
    return 0


def _no_nan(value: Any) -> Any:
    """``value`` with NaN (a CPU figure without a sidecar) as None: JSON has no NaN."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_nan(v) for v in value]
    return value


if __name__ == "__main__":
    harness.entry(main, "images")
