"""The epochfs demo: the whole mission on one machine, in about a minute (``make demo``, as root).

1. generates a "remote" dataset on local disk (incompressible float32 arrays in .npz files, with a
   label that a small model can learn),
2. starts ``epochfs sidecar`` with a cache much smaller than the dataset and a download rate limit,
   so the cache grows while training runs and then evicts its oldest samples,
3. trains a small torch model for six epochs through ``EpochLoader`` over the mount's ``epoch-N/``
   folders, printing one line per epoch (samples, new, left out of the epoch before, cache
   occupancy, read rate, loss). The model is tiny: unpaced, it finishes an epoch long before the
   sampler has fetched a second one, and how much the epochs grow would depend on the machine's
   speed. So each step is paced to read at most ``--train-rate`` bytes a second (half the download
   rate by default), standing in for a real model's compute: each epoch then about triples until
   the cache is full, and a slower (loaded) machine only makes the epochs grow sooner. The pace
   also makes a full epoch last longer than the turnover's delay: the samples an epoch leaves out
   become evictable once the epoch before has been released (5 s after the loader closes its
   folder: the mount's margin for a held epoch) and its ``--retire-grace`` (1 s here) has passed;
   with full epochs of ~4.5 s, that is before the epoch after next is cut, so every full epoch
   brings new samples (shorter epochs would bring them in bursts, a few epochs apart),
4. stops the sidecar (SIGTERM: it unmounts and exits 0), also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import torch

from epochfs.sidecar.confparse import parse_size
from epochfs.torchclient import EpochLoader, EpochStats
from epochfs.torchclient.describe import decimal_size  # the rate in the unit that fits

DIM = 1024  # float32 values per sample: 4 KiB of array data, incompressible


def generate_dataset(root: Path, count: int, *, seed: int = 0) -> None:
    """``count`` samples ``train/NNNNN.npz`` with ``x`` (random float32) and a learnable label ``y``."""
    rng = np.random.default_rng(seed)
    direction = rng.standard_normal(DIM).astype(np.float32)
    (root / "train").mkdir(parents=True, exist_ok=True)
    for i in range(count):
        x = rng.standard_normal(DIM).astype(np.float32)
        y = np.int64(x @ direction > 0)
        np.savez(root / "train" / f"{i:05d}.npz", x=x, y=y)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(port: int, sidecar: subprocess.Popen[bytes], log: Path, timeout: float = 60.0) -> None:
    """Poll /readyz until the mount is up and epoch 0 can be cut."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sidecar.poll() is not None:
            sys.exit(f"demo: the sidecar exited with status {sidecar.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    sys.exit(f"demo: the sidecar was not ready after {timeout:.0f}s:\n{log.read_text()[-3000:]}")


def stop(sidecar: subprocess.Popen[bytes], mount: Path) -> None:
    """SIGTERM the sidecar (it stops the sampler and unmounts), then make sure nothing is left."""
    if sidecar.poll() is None:
        sidecar.send_signal(signal.SIGTERM)
        try:
            sidecar.wait(timeout=20)
        except subprocess.TimeoutExpired:
            sidecar.kill()
            sidecar.wait()
    if os.path.ismount(mount):
        subprocess.run(["fusermount3", "-uz", str(mount)], check=False)


def pace(started: float, consumed: int, rate: int) -> None:
    """Sleep until ``consumed`` bytes read since ``started`` are no faster than ``rate`` bytes/s.

    This stands in for the compute of a real model (seconds per batch, where the demo's takes
    microseconds): with training and downloads at the same rate, the sampler fetches about one
    epoch's worth while an epoch trains, which is the growth the demo shows on any machine."""
    ahead = consumed / rate - (time.monotonic() - started)
    if ahead > 0:
        time.sleep(ahead)


def epoch_line(stats: EpochStats, status: dict[str, object], loss: float) -> str:
    entry = next((e for e in status["epochs"] if e["epoch"] == stats.epoch), None)  # type: ignore[attr-defined]
    new = entry["new"] if entry else "?"
    left_out = entry["evicted"] if entry else "?"  # of the epoch before's samples, not in this one
    used = int(status["cache_bytes"])  # type: ignore[call-overload]
    cap = int(status["capacity_bytes"])  # type: ignore[call-overload]
    return (
        f"epoch {stats.epoch}: {stats.files:5d} samples ({new} new, {left_out} left out)  "
        f"cache {used / 2**20:5.1f}/{cap / 2**20:.1f} MiB ({100 * used / cap:3.0f}%)  "
        f"{decimal_size(stats.mb_per_s * 1e6) + '/s':>11}  waited {stats.wait_seconds:4.2f}s  loss {loss:.3f}"
    )


class Interrupted:
    """Ctrl-C, remembered. Python drops a KeyboardInterrupt raised inside a finalizer (a dataset's
    or a DataLoader's ``__del__`` running when the signal came: "Exception ignored in ..."), and
    the same Ctrl-C killed the DataLoader's workers, so the loop went on into "DataLoader worker
    exited unexpectedly" and exit 1. :meth:`check` raises it again at the loop's next step."""

    def __init__(self) -> None:
        self.seen = False

    def __call__(self, signum: int, frame: object) -> None:
        self.seen = True
        raise KeyboardInterrupt

    def check(self) -> None:
        if self.seen:
            raise KeyboardInterrupt


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workdir", type=Path, default=None, help="keep files here (default: a temp dir)")
    parser.add_argument("--samples", type=int, default=4000, help="samples in the generated dataset")
    parser.add_argument("--capacity", default="6Mi", help="cache capacity (the dataset is ~17 MiB)")
    parser.add_argument("--max-rate", default="2Mi",
                        help="download rate limit, bytes/s (twice what the demo's training reads, so "
                             "each epoch roughly triples until the cache is full)")
    parser.add_argument("--train-rate", default=None,
                        help="bytes/s the training reads at most, standing in for a real model's "
                             "compute (default: half of --max-rate; 0: unpaced, as fast as the "
                             "machine goes; a full epoch shorter than about 3.5 s turns the cache "
                             "over in bursts, with epochs that bring no new sample between them)")
    parser.add_argument("--retire-grace", default="1",
                        help="the sidecar's --retire-grace, seconds (its minimum: a retired epoch's "
                             "samples become evictable soon, so a small cache turns over every epoch)")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    if os.geteuid() != 0:
        sys.exit("demo: FUSE mounts with allow_other need root here; run as root (make demo)")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="epochfs-demo-"))
    remote, cache, mount = workdir / "remote", workdir / "cache", workdir / "mnt"
    for d in (cache, mount):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    if not (remote / "train").is_dir():
        print(f"demo: generating {args.samples} samples under {remote}")
        generate_dataset(remote, args.samples)
    sample_bytes = next((remote / "train").iterdir()).stat().st_size  # every sample has the same size
    train_rate = parse_size(args.max_rate) // 2 if args.train_rate is None else parse_size(args.train_rate)

    # Torch set-up first (its first use in a process takes a moment), so epoch 0 is asked for as soon
    # as the sidecar is ready: the loader looks nothing up until an epoch starts.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(DIM, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = EpochLoader(mount, batch_size=32, num_workers=args.workers, decode="npz", progress=None)

    port = free_port()
    log = workdir / "sidecar.log"
    cmd = [sys.executable, "-m", "epochfs.sidecar.cli", "sidecar", "--remote", f"file://{Path(remote).resolve()}",
           "--cache", str(cache), "--mount", str(mount), "--capacity", args.capacity,
           "--max-rate", args.max_rate, "--min-samples", "64", "--concurrency", "8",
           # Demo epochs last seconds: keep only the newest two epochs pinned, and the epoch being
           # read (real runs keep the default 600 s window for an epoch a slow rank has just
           # opened, and the default 5 s grace).
           "--in-use-seconds", "0", "--retire-grace", args.retire_grace,
           "--health-port", str(port)]
    interrupted = Interrupted()
    signal.signal(signal.SIGINT, interrupted)
    print(f"demo: starting the sidecar (log: {log})")
    with open(log, "wb") as out:
        # Its own session: Ctrl-C reaches the demo only, which then stops the sidecar with one SIGTERM
        # (a second signal would make it exit at once instead of cleanly).
        sidecar = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_ready(port, sidecar, log)
        # Cut epoch 0 now, with a lookup: the loader's first lookup comes after its workers start,
        # and on a busy machine the sampler filled the whole cache meanwhile (epoch 0 was then as
        # large as every later one, and the demo showed no growth).
        (mount / "epoch-0").is_dir()
        print(f"demo: mounted at {mount}; training {args.epochs} epochs on growing epoch-N/ folders")
        for epoch in range(args.epochs):
            losses = []
            started, consumed = time.monotonic(), 0
            try:
                for batch in loader.epoch(epoch):
                    interrupted.check()
                    optimizer.zero_grad()
                    loss = torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])
                    loss.backward()
                    optimizer.step()
                    losses.append(loss.item())
                    consumed += len(batch["y"]) * sample_bytes
                    if train_rate:
                        pace(started, consumed, train_rate)
            except RuntimeError:
                interrupted.check()  # the workers a swallowed Ctrl-C killed: the Ctrl-C it was
                raise
            interrupted.check()
            status = json.loads((mount / ".epochfs" / "status.json").read_text())
            print(epoch_line(loader.history[-1], status, sum(losses) / max(1, len(losses))), flush=True)
        print("demo: done; stopping the sidecar")
        return 0
    except KeyboardInterrupt:
        print("\ndemo: interrupted; stopping the sidecar")
        return 130
    finally:
        loader.close()
        stop(sidecar, mount)
        left = os.path.ismount(mount)
        print(f"demo: sidecar exited with {sidecar.returncode}; mount {'STILL PRESENT' if left else 'gone'}")
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
