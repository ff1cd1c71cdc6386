"""``EpochDataset``: the files of one ``epoch-N/`` folder as a map-style torch Dataset.

The file list comes from the epoch's manifest (no directory walk over a million files), falling back
to a walk of the folder where there is none (a plain folder). Asking for an epoch above the newest asks
the sidecar for its cut; the dataset waits for it with backoff, tells the user what it waits for, and
gives up with a :class:`TimeoutError` that says what *is* there.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset

from .decode import Decoder, load_sample, resolve_decoder
from .layout import epoch_dir, epoch_exists, list_epochs, read_manifest, read_status, walk_epoch

Progress = Callable[[str], None]


def print_progress(line: str) -> None:
    """Default progress sink: one line on stderr, where a training log shows it."""
    print(line, file=sys.stderr, flush=True)


def describe_root(root: str | os.PathLike[str]) -> str:
    """What is under ``root`` now, in words: the epochs present and the sidecar's status, if any."""
    epochs = list_epochs(root)
    if not epochs:
        parts = ["no epoch folders yet"]
    elif epochs == list(range(epochs[0], epochs[-1] + 1)) and len(epochs) > 2:
        parts = [f"epochs {epochs[0]}-{epochs[-1]} present"]
    else:
        parts = [f"epochs {', '.join(map(str, epochs))} present"]
    status = read_status(root)
    if status is not None:
        bits = []
        if isinstance(status.get("samples"), int):
            bits.append(f"{status['samples']} samples cached")
        if isinstance(status.get("cache_bytes"), int) and isinstance(status.get("capacity_bytes"), int):
            bits.append(f"{status['cache_bytes'] / 1e6:.1f} of {status['capacity_bytes'] / 1e6:.1f} MB")
        if status.get("pending_cuts"):
            bits.append(f"pending cuts {status['pending_cuts']}")
        if status.get("backpressure"):
            bits.append("sampler paused by backpressure")
        if bits:
            parts.append("sidecar: " + ", ".join(bits))
    return "; ".join(parts)


def _check_epoch(epoch: object) -> int:
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ValueError(f"epoch must be a non-negative int, got {epoch!r}")
    return epoch


def _check_timeout(timeout: object) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0 \
            or math.isnan(timeout):
        raise ValueError("timeout must be a positive number of seconds (math.inf to wait forever), "
                         f"got {timeout!r}")
    return float(timeout)


def wait_for_epoch(root: str | os.PathLike[str], epoch: int, *, wait: bool = True, timeout: float = 600.0,
                   progress: Progress | None = print_progress, progress_every: float = 5.0) -> float:
    """Look up ``root/epoch-N`` (on the mount, the lookup asks for the cut) until it exists.

    Returns the seconds spent waiting. The first miss reports at once (so a user sees why training
    has not started), then every ``progress_every`` seconds; lookups back off from 20 ms to 0.5 s.
    Raises FileNotFoundError for a missing root, or a missing epoch with ``wait=False``, and
    TimeoutError after ``timeout``; both name the epoch and say what is present.
    """
    epoch = _check_epoch(epoch)
    timeout = _check_timeout(timeout)
    root = Path(root)
    start = time.monotonic()
    if epoch_exists(root, epoch):
        return 0.0
    if not root.is_dir():
        raise FileNotFoundError(f"epochfs root {root} does not exist or is not a folder "
                                "(is the sidecar's mount there?)")
    if not wait:
        raise FileNotFoundError(f"epoch {epoch} is not under {root} ({describe_root(root)}); "
                                "pass wait=True to wait for its cut")
    delay = 0.02
    next_report = start
    while True:
        now = time.monotonic()
        if now >= next_report and progress is not None:
            progress(f"epochfs: waiting for epoch {epoch} under {root} ({now - start:.0f}s so far; "
                     f"{describe_root(root)})")
            next_report = now + progress_every
        remaining = timeout - (now - start)
        if remaining <= 0:
            raise TimeoutError(f"epoch {epoch} did not appear under {root} within {timeout:g}s "
                               f"({describe_root(root)})")
        time.sleep(min(delay, remaining))
        delay = min(delay * 1.5, 0.5)
        if epoch_exists(root, epoch):
            return time.monotonic() - start


class EpochDataset(Dataset[Any]):
    """The files of ``root/epoch-<epoch>/`` in a stable order (by relative path); item i is file i decoded.

    ``decode``: "npy" (memory-mapped, no copy in the reading process), "npz" (dict of tensors), "pt"
    (``weights_only=True``), "bytes" (uint8 tensor), "auto" (by extension; unknown ones are bytes) or a
    callable taking a path. ``transform`` is applied to the decoded sample. With ``wait=True`` an epoch
    that is not there yet is waited for (up to ``timeout`` seconds); ``progress`` receives the waiting
    lines (None silences them).
    """

    def __init__(self, root: str | os.PathLike[str], epoch: int, *, decode: str | Decoder = "auto",
                 transform: Callable[[Any], Any] | None = None, wait: bool = True, timeout: float = 600.0,
                 progress: Progress | None = print_progress) -> None:
        self.epoch = _check_epoch(epoch)
        self.decoder: Decoder = resolve_decoder(decode)
        if transform is not None and not callable(transform):
            raise ValueError(f"transform must be callable or None, got {transform!r}")
        self.transform = transform
        _check_timeout(timeout)
        self.root = Path(root)
        self.wait_seconds = wait_for_epoch(self.root, self.epoch, wait=wait, timeout=timeout,
                                           progress=progress)
        self.dir = epoch_dir(self.root, self.epoch)
        manifest = read_manifest(self.root, self.epoch)
        self.checksums: list[str] | None
        if manifest is not None:
            self.source = "manifest"
            self.files = manifest.paths
            self.sizes = manifest.sizes
            self.checksums = manifest.checksums
        else:
            self.source = "walk"
            listing = walk_epoch(self.root, self.epoch)
            self.files = [path for path, _ in listing]
            self.sizes = [size for _, size in listing]
            self.checksums = None
        self.nbytes = sum(self.sizes)

    def __len__(self) -> int:
        return len(self.files)

    def path(self, index: int) -> Path:
        """The path of sample ``index`` (inside ``epoch-N/``, so reading it pins the epoch on the mount)."""
        return self.dir / self.files[index]

    def __getitem__(self, index: int) -> Any:
        return load_sample(str(self.dir / self.files[index]), self.decoder, self.transform)

    def __repr__(self) -> str:
        return (f"EpochDataset(root={str(self.root)!r}, epoch={self.epoch}, files={len(self.files)}, "
                f"bytes={self.nbytes}, from={self.source})")
