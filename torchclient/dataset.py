"""``EpochDataset``: the files of one ``epoch-N/`` folder as a map-style torch Dataset.

The file list comes from the epoch's manifest (no directory walk over a million files), falling back
to a walk of the folder where there is none (a plain folder). Asking for an epoch above the newest asks
the sidecar for its cut; the dataset waits for it with backoff, tells the user what it waits for, and
gives up with a :class:`TimeoutError` that says what *is* there (:mod:`.waiting`, whose waiting line
:mod:`.describe` words).

Two things keep a reader's epoch whole on the mount (docs/torchclient.md, "Pauses and restarts"):
the dataset **holds its epoch open** (one open folder handle on ``epoch-N/`` in the process that made
it, never in its worker processes, released by :meth:`EpochDataset.release`, or when the dataset is
collected), which the sidecar counts as a reader inside the epoch, so a pause of any length loses
nothing; and reads of listed files that fail the way a mount being restarted fails are **retried**
for up to ``retry_seconds`` (:mod:`.retry`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from torch.utils.data import Dataset

from .decode import MAX_ARRAY_BYTES, Decoder, check_max_bytes, load_sample, resolve_decoder
from .epochwalk import walk_epoch
from .globs import KeyFilter
from .labels import ClassMap, check_class_root, check_classes, class_map, label_files
from .layout import Manifest, epoch_dir, epoch_exists, read_manifest
from .retry import RETRY_SECONDS, check_retry_seconds, retrying
from .waiting import Progress, check_epoch, check_timeout, print_progress, wait_for_epoch

log = logging.getLogger("epochfs.torchclient")

HOLD_CHECK_SECONDS = 5.0
"""How often (at most) a dataset checks that its hold is on the mount now there (not a replaced one)."""

_HOLDING: weakref.WeakSet[EpochDataset] = weakref.WeakSet()
"""The datasets of this process that hold their epoch open now (weakly: a collected one closes its own)."""


def _drop_holds_in_child() -> None:
    """In a child made by ``fork`` (a DataLoader's workers on Linux), close the copies of the parent's
    holds. A forked child shares each open folder handle, and the kernel tells FUSE the folder is
    released only when the last copy closes: a persistent worker would keep the epoch in use for the
    whole job although the parent released it. ``O_CLOEXEC`` does not help (there is no exec) and
    ``__getstate__`` does not run (nothing is pickled). The parent's own holds stay as they are."""
    for dataset in list(_HOLDING):
        dataset._holding = False
        dataset._close_hold()
    _HOLDING.clear()


if hasattr(os, "register_at_fork"):  # POSIX; spawned children exec, so O_CLOEXEC closes theirs
    os.register_at_fork(after_in_child=_drop_holds_in_child)


def _shown(patterns: Sequence[str], most: int = 4) -> str:
    listed = ", ".join(repr(p) for p in patterns[:most])
    return listed + (f" and {len(patterns) - most} more" if len(patterns) > most else "")


NOTHING_KEPT_RAISES = 1000
"""Files an epoch holds from which patterns that keep none of them raise rather than warn: an
early epoch is a few samples by design (the sampler holds its first epochs to 1-3 while the
listing is young), and one that happens to hold only side files (``x.json`` beside ``x.jpg``) is
no mistake; a thousand files none of which a pattern keeps almost surely are (a pattern that
keeps 1% of a dataset misses a uniform epoch of 1,000 with a chance of 4e-5)."""


def nothing_kept(keys: KeyFilter, epoch: int, files: Sequence[str]) -> str:
    """Why an epoch whose files ``keys`` all leave out trains no step: a typo'd or wrong-case
    pattern would otherwise train zero steps every epoch without a word (an epoch with no files at
    all is no such mistake and stays a dataset of length 0). Raised as a ValueError from
    :data:`NOTHING_KEPT_RAISES` files, logged as a warning below."""
    given = " and ".join(f"{what}={_shown(p)}" for what, p in (("include", keys.include),
                                                                ("exclude", keys.exclude)) if p)
    named = ", ".join(files[:3]) + (" ..." if len(files) > 3 else "")
    small = "" if len(files) >= NOTHING_KEPT_RAISES else (
        "; the epoch trains no step (an early epoch of a few samples may hold none they keep: "
        "if later epochs say so too, the patterns are wrong)")
    return (f"{given} keep none of epoch {epoch}'s {len(files)} files (e.g. {named}): check the "
            "patterns (they are case-sensitive and match the path inside epoch-N/; one without '/' "
            f"matches a name at any depth){small}")


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
    not hold it (pickled ones start without it, forked ones close theirs: :func:`_drop_holds_in_child`).

    ``include``/``exclude`` choose the files (a comma-separated string of globs or a list of them,
    matched against the path inside ``epoch-N/``, the sidecar's ``--include``/``--exclude`` rule,
    :mod:`.globs`): a file is kept when it matches an include (or none is given) and no exclude;
    the manifest's order is kept and ``excluded`` counts the files left out. Patterns are checked
    before the epoch is looked up (a bad one is a ValueError naming the argument), and patterns
    that leave out every file of an epoch that has files are a warning naming them, a ValueError
    from :data:`NOTHING_KEPT_RAISES` files (:func:`nothing_kept`).

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
        self.epoch = check_epoch(epoch)
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
        check_timeout(timeout)
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
            if not keep and self.files:
                if len(self.files) >= NOTHING_KEPT_RAISES:
                    raise ValueError(nothing_kept(self.keys, self.epoch, self.files))
                log.warning("%s", nothing_kept(self.keys, self.epoch, self.files))
            self.excluded = len(self.files) - len(keep)
            self.files = [self.files[i] for i in keep]
            self.sizes = [self.sizes[i] for i in keep]
            if self.checksums is not None:
                self.checksums = [self.checksums[i] for i in keep]
        self.class_map: ClassMap | None = None
        self.targets: list[int] | None = None
        """With ``label="folder"``: the class index of each file (ImageFolder's ``targets``)."""
        if label == "folder":
            self.class_map = class_map(self.root, self.epoch, self.class_root, self.files, classes=classes,
                                       keep=self.keys.keep if self.keys else None)
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
        _HOLDING.add(self)
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
        _HOLDING.discard(self)

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
        # Not contextlib.suppress: at interpreter exit this module's globals may be None already.
        try:  # noqa: SIM105
            self._close_hold()
        except Exception:
            pass

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
