"""``EpochDataset``: the files of one ``epoch-N/`` folder as a map-style torch Dataset.

The file list comes from the epoch's manifest (no directory walk over a million files), falling back
to a walk of the folder where there is none (a plain folder). Asking for an epoch above the newest asks
the sidecar for its cut; the dataset waits for it with backoff, tells the user what it waits for, and
gives up with a :class:`TimeoutError` that says what *is* there.

Two things keep a reader's epoch whole on the mount (docs/torchclient.md, "Pauses and restarts"):
the dataset **holds its epoch open** (one open folder handle on ``epoch-N/`` in the process that made
it, released by :meth:`EpochDataset.release`, or when the dataset is collected), which the sidecar
counts as a reader inside the epoch, so a pause of any length loses nothing; and reads of listed files
that fail the way a mount being restarted fails are **retried** for up to ``retry_seconds``
(:mod:`.retry`).
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import stat
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset

from .cutask import CutAnswer, ask_cut, sidecar_url_from_env
from .decode import MAX_ARRAY_BYTES, Decoder, check_max_bytes, load_sample, resolve_decoder
from .globs import KeyFilter
from .labels import ClassMap, check_class_root, check_classes, class_map, label_files
from .layout import (
    MAX_EPOCH,
    Manifest,
    epoch_dir,
    epoch_exists,
    list_epochs,
    read_manifest,
    read_status,
    walk_epoch,
)
from .retry import RETRY_SECONDS, check_retry_seconds, retrying

HOLD_CHECK_SECONDS = 5.0
"""How often (at most) a dataset checks that its hold is on the mount now there (not a replaced one)."""

Progress = Callable[[str], None]


def print_progress(line: str) -> None:
    """Default progress sink: one line on stderr, where a training log shows it."""
    print(line, file=sys.stderr, flush=True)


def decimal_size(n: float) -> str:
    """``n`` bytes in the decimal unit that fits: ``512 B``, ``44.0 kB``, ``199.5 MB``, ``1.2 GB``.
    The torch client's one formatter of sizes and rates (:meth:`.EpochStats.line`, the waiting
    line, the demo's epoch line): fixed MB printed a small cache or epoch as "0.0 MB"."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


class FirstEpochPace:
    """The last reading of epoch 0's count the waiting line saw, so the next line can say when epoch 0
    comes: ``~40 s at 4.0 samples/s (16.4 kB/s)`` (the sidecar's /readyz and ``epochfs status`` say the
    same from their own readings)."""

    def __init__(self) -> None:
        self.at: float | None = None
        self.samples = 0
        self.bytes = 0

    def estimate(self, samples: int, target: int, nbytes: int | None) -> str:
        """``, ~N s at R samples/s (B/s)`` from the reading before this one ('' on the first
        reading or when nothing came since), and this reading kept for the next."""
        now = time.monotonic()
        said = ""
        if self.at is not None and now > self.at and samples > self.samples:
            rate = (samples - self.samples) / (now - self.at)
            said = f", ~{max(0, target - samples) / rate:.0f} s at {rate:.1f} samples/s"
            if nbytes is not None and nbytes > self.bytes:
                said += f" ({decimal_size((nbytes - self.bytes) / (now - self.at))}/s)"
        self.at, self.samples, self.bytes = now, samples, nbytes or 0
        return said


def describe_root(root: str | os.PathLike[str], pace: FirstEpochPace | None = None) -> str:
    """What is under ``root`` now, in words: the epochs present and the sidecar's status, if any.
    ``pace``: the waiting line's readings of epoch 0's count, for a time estimate."""
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
        first = status.get("first_epoch")
        if isinstance(first, dict) and isinstance(first.get("samples"), int) and \
                isinstance(first.get("target"), int) and first["target"] > 0:
            # Before the first cut: how far epoch 0 is (its target: --min-samples or the window).
            have, target = min(first["samples"], first["target"]), first["target"]
            nbytes = status.get("cache_bytes") if isinstance(status.get("cache_bytes"), int) else None
            bits.append(f"epoch 0: {have}/{target} samples cached ({100 * have // target}%)"
                        + (pace.estimate(have, target, nbytes) if pace is not None else "")
                        + (", waiting for the listing's first round" if first.get("listing_round") else ""))
        elif isinstance(status.get("samples"), int):
            bits.append(f"{status['samples']} samples cached")
        if isinstance(status.get("cache_bytes"), int) and isinstance(status.get("capacity_bytes"), int):
            bits.append(f"{decimal_size(status['cache_bytes'])} of {decimal_size(status['capacity_bytes'])}")
        if status.get("pending_cuts"):
            bits.append(f"pending cuts {status['pending_cuts']}")
        if status.get("backpressure"):
            bits.append("sampler paused by backpressure")
        if bits:
            parts.append("sidecar: " + ", ".join(bits))
        if isinstance(status.get("sampler_retrying"), str) and status["sampler_retrying"]:
            # Why no data comes: the remote is unreachable at the sampler's start.
            parts.append(f"sampler: {status['sampler_retrying']}")
    return "; ".join(parts)


def _check_epoch(epoch: object) -> int:
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= MAX_EPOCH:
        raise ValueError(f"epoch must be an int from 0 to {MAX_EPOCH:,} (the largest epoch number), "
                         f"got {epoch!r}")
    return epoch


def _check_timeout(timeout: object) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0 \
            or math.isnan(timeout):
        raise ValueError("timeout must be a positive number of seconds (math.inf to wait forever), "
                         f"got {timeout!r}")
    return float(timeout)


class _FromEnv:
    """The default of ``sidecar_url``: ``EPOCHFS_REPORT_URL``'s scheme and host."""


FROM_ENV = _FromEnv()
ASK_EVERY = 1.0
"""Seconds between cut requests while an epoch is missing (the sidecar queues the next epoch; asking
again covers a sidecar restart and a jump, which is never queued)."""
PUBLISH_GRACE = 5.0
"""How long ``wait=False`` still looks for an epoch the sidecar just said is live (the folder view
publishes it within about 0.1 s)."""


def wait_for_epoch(root: str | os.PathLike[str], epoch: int, *, wait: bool = True, timeout: float = 600.0,
                   progress: Progress | None = print_progress, progress_every: float = 5.0,
                   jump: bool = False, sidecar_url: str | _FromEnv | None = FROM_ENV) -> float:
    """Look up ``root/epoch-N`` (on the mount, the lookup asks for the cut) until it exists.

    While it is missing, the sidecar at ``sidecar_url`` (default: from ``EPOCHFS_REPORT_URL``; None:
    never) is also asked for the cut (``POST /v1/cut``, :mod:`.cutask`), once a second: on the folder
    view (``--view folder``) that request is what a lookup is on the FUSE view. ``jump=True`` lets
    the cut skip numbers (a resumed trainer starting above the newest epoch + 1); otherwise only
    the next epoch is cut, as for a lookup.

    Returns the seconds spent waiting. The first miss reports at once (so a user sees why training
    has not started), then every ``progress_every`` seconds; lookups back off from 20 ms to 0.5 s.
    Raises FileNotFoundError for a missing root, a missing epoch with ``wait=False``, or one the
    sidecar says can never be cut (retired, or below the newest and never cut), and TimeoutError
    after ``timeout``; each names the epoch and says what is present.
    """
    epoch = _check_epoch(epoch)
    timeout = _check_timeout(timeout)
    root = Path(root)
    start = time.monotonic()
    if epoch_exists(root, epoch):
        return 0.0
    if not _root_present(root):
        raise FileNotFoundError(f"epochfs root {root} does not exist or is not a folder "
                                "(is the sidecar's mount there?)")
    base = sidecar_url_from_env() if isinstance(sidecar_url, _FromEnv) else sidecar_url
    answer = ask_cut(base, epoch, jump=jump) if base else None
    _check_answer(answer, root, epoch)
    if not wait:
        if answer is not None and answer.state == "live":
            return _wait_published(root, epoch, start)
        raise FileNotFoundError(f"epoch {epoch} is not under {root} ({describe_root(root)}); "
                                "pass wait=True to wait for its cut")
    delay = 0.02
    next_report = start
    next_ask = start + ASK_EVERY
    pace = FirstEpochPace()
    while True:
        now = time.monotonic()
        if now >= next_report and progress is not None:
            said = f"; sidecar: {answer.message}" if answer is not None and answer.state != "live" else ""
            progress(f"epochfs: waiting for epoch {epoch} under {root} ({now - start:.0f}s so far; "
                     f"{describe_root(root, pace)}{said})")
            next_report = now + progress_every
        remaining = timeout - (now - start)
        if remaining <= 0:
            raise TimeoutError(f"epoch {epoch} did not appear under {root} within {timeout:g}s "
                               f"({describe_root(root)})")
        time.sleep(min(delay, remaining))
        delay = min(delay * 1.5, 0.5)
        if epoch_exists(root, epoch):
            return time.monotonic() - start
        if base and time.monotonic() >= next_ask:
            answer = ask_cut(base, epoch, jump=jump) or answer
            _check_answer(answer, root, epoch)
            next_ask = time.monotonic() + ASK_EVERY


def _check_answer(answer: CutAnswer | None, root: Path, epoch: int) -> None:
    if answer is not None and answer.final and not epoch_exists(root, epoch):
        raise FileNotFoundError(f"epoch {epoch} will not appear under {root}: the sidecar says "
                                f"{answer.message} ({describe_root(root)})")


def _wait_published(root: Path, epoch: int, start: float) -> float:
    """The sidecar cut it: the folder view shows it within about 0.1 s."""
    delay = 0.01
    while time.monotonic() - start < PUBLISH_GRACE:
        if epoch_exists(root, epoch):
            return time.monotonic() - start
        time.sleep(delay)
        delay = min(delay * 2, 0.2)
    raise FileNotFoundError(f"epoch {epoch} was cut but did not appear under {root} within "
                            f"{PUBLISH_GRACE:g}s ({describe_root(root)})")


def _root_present(root: Path) -> bool:
    """A folder, or a mount being replaced (a dead FUSE mount answers ENOTCONN): wait for it then."""
    try:
        return stat.S_ISDIR(os.stat(root).st_mode)
    except OSError as e:
        return e.errno in (errno.ENOTCONN, errno.ECONNABORTED)


class EpochDataset(Dataset[Any]):
    """The files of ``root/epoch-<epoch>/`` in a stable order (by relative path); item i is file i decoded.

    ``decode``: "npy" (memory-mapped, no copy in the reading process), "npz" (dict of tensors), "pt"
    (``weights_only=True``), "bytes" (uint8 tensor), "auto" (by extension; unknown ones are bytes) or a
    callable taking a path. ``transform`` is applied to the decoded sample. With ``wait=True`` an epoch
    that is not there yet is waited for (up to ``timeout`` seconds); ``progress`` receives the waiting
    lines (None silences them). A missing epoch is also asked of the sidecar (the folder view's
    lookup, :func:`wait_for_epoch`); ``jump=True`` lets that cut skip numbers (a resumed trainer's
    first epoch above the newest + 1). ``max_array_bytes`` (default 2 GiB; None: no limit) bounds what
    one ``.npz`` member may inflate to with ``decode="npz"`` or ``"auto"``.

    ``retry_seconds`` bounds the retries of a listed file that is briefly unreachable (a restart of
    the sidecar's FUSE server; 0 turns them off). ``hold`` (default True) keeps ``epoch-N/`` open in
    the process that made the dataset until :meth:`release` (or until the dataset is collected), so
    the sidecar keeps the epoch whole however long the reader pauses; copies in worker processes do
    not hold it.

    ``include``/``exclude`` choose the files (a comma-separated string of globs or a list of them,
    matched against the path inside ``epoch-N/``, the sidecar's ``--include``/``--exclude`` rule,
    :mod:`.globs`): a file is kept when it matches an include (or none is given) and no exclude;
    the manifest's order is kept and ``excluded`` counts the files left out. Patterns are checked
    before the epoch is looked up (a bad one is a ValueError naming the argument).

    ``label="folder"`` makes item i ``(sample, class index)``, the class being the folder of
    ``class_root`` (``"train"``; default ``"."``, the epoch's own folder) that holds the file:
    files outside a class folder are left out (counted in ``excluded``). The indexes come from the
    mount's ``.epochfs/classes.json``, the same in every epoch (:mod:`.labels`), or from
    ``classes=`` (``{name: index}`` or a list of names: another dataset's ``class_to_idx``, say).
    ``classes``, ``class_to_idx`` and ``targets`` are then as torchvision's ImageFolder has them.
    """

    def __init__(self, root: str | os.PathLike[str], epoch: int, *, decode: str | Decoder = "auto",
                 transform: Callable[[Any], Any] | None = None, wait: bool = True, timeout: float = 600.0,
                 progress: Progress | None = print_progress, retry_seconds: float = RETRY_SECONDS,
                 hold: bool = True, jump: bool = False,
                 max_array_bytes: int | None = MAX_ARRAY_BYTES,
                 include: str | Sequence[str] | None = None,
                 exclude: str | Sequence[str] | None = None, label: str | None = None,
                 class_root: str = ".", classes: Mapping[str, int] | Sequence[str] | None = None) -> None:
        self.epoch = _check_epoch(epoch)
        self.keys = KeyFilter(include, exclude)
        if label not in (None, "folder"):
            raise ValueError(f"label must be None or 'folder' (the class folder's index), got {label!r}")
        self.label = label
        self.class_root = check_class_root(class_root)
        if classes is not None:
            check_classes(classes)
        self.decoder: Decoder = resolve_decoder(decode, max_array_bytes=check_max_bytes(max_array_bytes))
        if transform is not None and not callable(transform):
            raise ValueError(f"transform must be callable or None, got {transform!r}")
        self.transform = transform
        _check_timeout(timeout)
        self.retry_seconds = check_retry_seconds(retry_seconds)
        self.root = Path(root)
        self._hold: int | None = None
        self._hold_dev: int | None = None
        self._hold_checked = 0.0
        self._holding = bool(hold)
        self.wait_seconds = wait_for_epoch(self.root, self.epoch, wait=wait, timeout=timeout,
                                           progress=progress, jump=jump)
        self.dir = epoch_dir(self.root, self.epoch)
        listing = retrying(f"the file list of {self.dir}", self._list, seconds=self.retry_seconds)
        self.checksums: list[str] | None
        if isinstance(listing, Manifest):
            self.source = "manifest"
            self.files = listing.paths
            self.sizes = listing.sizes
            self.checksums = listing.checksums
        else:
            self.source = "walk"
            self.files = [path for path, _ in listing]
            self.sizes = [size for _, size in listing]
            self.checksums = None
        self.excluded = 0
        """Files of the epoch that ``include``/``exclude`` left out."""
        if self.keys:
            keep = [i for i, path in enumerate(self.files) if self.keys.keep(path)]
            self.excluded = len(self.files) - len(keep)
            self.files = [self.files[i] for i in keep]
            self.sizes = [self.sizes[i] for i in keep]
            if self.checksums is not None:
                self.checksums = [self.checksums[i] for i in keep]
        self.class_map: ClassMap | None = None
        self.targets: list[int] | None = None
        """With ``label="folder"``: the class index of each file (ImageFolder's ``targets``)."""
        if label == "folder":
            self.class_map = class_map(self.root, self.epoch, self.class_root, self.files, classes=classes)
            keep, self.targets = label_files(self.files, self.class_root, self.class_map.class_to_idx)
            self.excluded += len(self.files) - len(keep)
            self.files = [self.files[i] for i in keep]
            self.sizes = [self.sizes[i] for i in keep]
            if self.checksums is not None:
                self.checksums = [self.checksums[i] for i in keep]
        self.nbytes = sum(self.sizes)
        if self._holding:
            self._open_hold()

    def _list(self) -> Manifest | list[tuple[str, int]]:
        """The manifest, else a walk; a folder that is not there (the mount being replaced: its
        mount point is empty for a moment) is an ENOENT, which the caller retries, never an empty
        epoch."""
        manifest = read_manifest(self.root, self.epoch)
        if manifest is not None:
            return manifest
        if not epoch_exists(self.root, self.epoch):
            raise FileNotFoundError(errno.ENOENT, "epoch folder not found", str(self.dir))
        listing = walk_epoch(self.root, self.epoch)
        if not epoch_exists(self.root, self.epoch):  # gone during the walk: the walk saw nothing
            raise FileNotFoundError(errno.ENOENT, "epoch folder gone during the walk", str(self.dir))
        return listing

    # ------------------------------------------------------------------ holding the epoch open
    def _open_hold(self) -> None:
        self._close_hold()
        try:
            fd = os.open(self.dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return  # retried at the next renew_hold(); the in-use window still applies
        self._hold = fd
        try:
            self._hold_dev = os.fstat(fd).st_dev
        except OSError:
            self._hold_dev = None
        self._hold_checked = time.monotonic()

    def _close_hold(self) -> None:
        fd, self._hold = self._hold, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    @property
    def held(self) -> bool:
        """Whether this process holds ``epoch-N/`` open now."""
        return self._hold is not None

    def renew_hold(self) -> None:
        """Take the hold again if the mount was replaced since (a FUSE server restart: the old
        handle belongs to the dead mount). Cheap: at most one ``stat`` of the root per 5 s."""
        if not self._holding:
            return
        now = time.monotonic()
        if now - self._hold_checked < HOLD_CHECK_SECONDS:
            return
        self._hold_checked = now
        try:
            dev = os.stat(self.dir).st_dev
        except OSError:
            return  # the mount is away; try again later
        if self._hold is None or dev != self._hold_dev:
            self._open_hold()

    def release(self) -> None:
        """Stop holding the epoch open (the sidecar may retire it once the in-use window passes)."""
        self._holding = False
        self._close_hold()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_hold=None, _hold_dev=None, _holding=False)  # copies (workers) do not hold
        return state

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._close_hold()

    # ------------------------------------------------------------------ the Dataset
    def __len__(self) -> int:
        return len(self.files)

    def path(self, index: int) -> Path:
        """The path of sample ``index`` (inside ``epoch-N/``, so reading it pins the epoch on the mount)."""
        return self.dir / self.files[index]

    @property
    def class_to_idx(self) -> dict[str, int]:
        """With ``label="folder"``: class name -> index (every class the cache knows, not only
        those in this epoch)."""
        if self.class_map is None:
            raise AttributeError("class_to_idx: this dataset has no labels (pass label='folder')")
        return self.class_map.class_to_idx

    @property
    def classes(self) -> list[str]:
        """With ``label="folder"``: the class names by index (``len(classes)``: the classes known)."""
        if self.class_map is None:
            raise AttributeError("classes: this dataset has no labels (pass label='folder')")
        return self.class_map.classes

    def __getitem__(self, index: int) -> Any:
        sample = load_sample(str(self.dir / self.files[index]), self.decoder, self.transform,
                             retry_seconds=self.retry_seconds)
        return sample if self.targets is None else (sample, self.targets[index])

    def __repr__(self) -> str:
        return (f"EpochDataset(root={str(self.root)!r}, epoch={self.epoch}, files={len(self.files)}, "
                f"bytes={self.nbytes}, from={self.source}"
                + (f", excluded={self.excluded}" if self.keys else "") + ")")
