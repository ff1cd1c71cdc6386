"""What the waiting line says: what is under the root now, epoch 0's pace, sizes in words.

Apart from :mod:`.waiting` because these only read the mount (its epochs, the sidecar's status
file) and put it in words, and never wait or ask the sidecar; :meth:`.EpochStats.line` uses
:func:`decimal_size` too. Torch-free.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable

from .layout import CONTROL_DIR, LATEST_NAME, list_epochs, parse_epoch_name, read_status

NOT_A_MOUNT = ("no .epochfs/ here either: not an epochfs mount (yet); is the sidecar's mount there? "
               "A new mount has .epochfs/ before epoch 0")
"""What the waiting line adds under a root with neither epochs nor the mount's control folder: a root
that exists but is not the mount (its mount point before the sidecar mounts, or a wrong path)."""


DEAD_MOUNT = ("the mount does not answer ({errno}: its FUSE server died or is restarting; under "
              "`epochfs sidecar` it is mounted again)")
"""The waiting line under a root (or its ``.epochfs/``) that answers ENOTCONN or ECONNABORTED: a
FUSE mount whose server is gone. It has no epochs and no control folder to show, so without this
line it reads as a folder that is not the mount, for as long as it stays dead."""


def not_answering(root: str | os.PathLike[str]) -> str | None:
    """:data:`DEAD_MOUNT` with the errno's name where ``root`` or its ``.epochfs/`` answers as a dead
    FUSE mount does (ENOTCONN, or ECONNABORTED from an aborted connection); None where they answer
    (or are simply missing). The listing is tried first: the kernel may still answer a ``stat``
    of the dead mount's root from the attributes it cached while the server lived."""
    control = os.path.join(root, CONTROL_DIR)
    probes: tuple[Callable[[], object], ...] = (
        lambda: os.listdir(root), lambda: os.stat(root), lambda: os.stat(control))
    for probe in probes:
        try:
            probe()
        except OSError as e:
            if e.errno in (errno.ENOTCONN, errno.ECONNABORTED):
                return DEAD_MOUNT.format(errno=errno.errorcode[e.errno])
    return None


CACHE_MARKS = ("index.sqlite", "objects")
"""What the sidecar's ``--cache`` folder holds (its index file, its objects folder) and a view never
does: a root with both is that folder, given where the ``--mount`` path belongs."""


def _is_dir(path: str | os.PathLike[str]) -> bool:
    """``os.path.isdir`` that is False also where the folder does not answer (a dead FUSE mount)."""
    try:
        return os.path.isdir(path)
    except OSError:
        return False


def not_the_mount(root: str | os.PathLike[str]) -> str | None:
    """Why ``root`` is certainly not the mount, naming the path to give instead; None when it may be.

    Why: such a root waits out the whole timeout with "no epoch folders yet", though the fix is a
    path. Only a root with neither ``.epochfs/`` nor an ``epoch-N`` folder is judged (both views,
    and a plain folder of epochs, show one of them), and it is certainly not the mount where:

    * it is an epoch folder (``epoch-N``, ``latest``) of a folder that has ``.epochfs/``: give its
      parent;
    * it is the sidecar's ``--cache`` folder (:data:`CACHE_MARKS`), a likely mix-up of the two
      flags;
    * a child folder has ``.epochfs/`` (``root`` is the pod volume above the view): give the child;
    * it shows entries (dot names aside) and is no mount point: both views refuse a ``--mount``
      that is not empty (the folder view's own earlier publishing has ``.epochfs/``), so nothing
      ever mounts or publishes the view there (the dataset's own folder, a typo'd path).

    An empty folder may still become the mount (its mount point before the sidecar mounts it, a
    published folder before its first epoch), and a mount point (a volume's root, lost+found and
    all) may still show the view once mounted: None there, as where the folder cannot be listed
    (a dead FUSE mount, which :func:`not_answering` words).
    """
    if _is_dir(os.path.join(root, CONTROL_DIR)) or list_epochs(root):
        return None
    absolute = os.path.abspath(root)
    parent = os.path.dirname(absolute)
    name = os.path.basename(absolute)
    an_epoch = parse_epoch_name(name) is not None or name == LATEST_NAME
    if an_epoch and _is_dir(os.path.join(parent, CONTROL_DIR)):
        return (f"{root} is an epoch folder of the mount at {parent}, not the mount: pass {parent} as the "
                "root (the epoch is the loader's or dataset's epoch argument)")
    if _is_cache(root):
        return (f"{root} is the sidecar's --cache folder, not its mount: pass the --mount path (the view) "
                "as the root")
    try:
        with os.scandir(root) as entries:
            shown = [entry for entry in entries if not entry.name.startswith(".")]
    except OSError:
        return None
    children = sorted(entry.path for entry in shown if _is_dir(os.path.join(entry.path, CONTROL_DIR)))
    if children:
        return (f"{root} is not the mount (it has no .epochfs/ and no epoch-N folders), but "
                f"{' and '.join(children)} {'is' if len(children) == 1 else 'are'}: pass "
                f"{'that' if len(children) == 1 else 'the one for this job'} as the root")
    if shown and not os.path.ismount(root):
        names = sorted(entry.name for entry in shown)
        listed = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        return (f"{root} is not the mount and never becomes it: it holds {listed} but no .epochfs/ and no "
                "epoch-N folders, is no mount point, and the sidecar refuses a --mount that is not "
                "empty: pass the sidecar's --mount path (the view) as the root")
    return None


def _is_cache(root: str | os.PathLike[str]) -> bool:
    """Whether ``root`` holds the sidecar's cache: its index file and its objects folder."""
    index, objects = CACHE_MARKS
    return os.path.isfile(os.path.join(root, index)) and _is_dir(os.path.join(root, objects))


def check_root(root: str | os.PathLike[str], *, present: bool) -> None:
    """FileNotFoundError at once for a root that is not there (``present``: the caller's own test,
    as a wait and a start differ on a mount not up yet) or is certainly not the mount
    (:func:`not_the_mount`): no wait there ever ends, and the message names the path to give."""
    if not present:
        raise FileNotFoundError(f"epochfs root {root} does not exist or is not a folder "
                                "(is the sidecar's mount there?)")
    wrong = not_the_mount(root)
    if wrong is not None:
        raise FileNotFoundError(wrong)


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
    dead = not_answering(root) if not epochs else None
    if dead is not None:
        parts = [dead]
    elif not epochs:
        control = _is_dir(os.path.join(root, CONTROL_DIR))
        parts = ["no epoch folders yet" + ("" if control else f", {NOT_A_MOUNT}")]
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
            # Before the first cut: how far it is (its target: --min-samples or the window); its
            # number is 0 but after an index reset that lost every epoch.
            have, target = min(first["samples"], first["target"]), first["target"]
            nbytes = status.get("cache_bytes") if isinstance(status.get("cache_bytes"), int) else None
            n = first.get("epoch") if isinstance(first.get("epoch"), int) else 0
            bits.append(f"epoch {n}: {have}/{target} samples cached ({100 * have // target}%)"
                        + (pace.estimate(have, target, nbytes) if pace is not None else "")
                        + (", waiting for the listing's first round" if first.get("listing_round") else "")
                        + (f"; {first['warning']}" if isinstance(first.get("warning"), str) else ""))
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
        later = status.get("next_epoch")
        if isinstance(later, dict) and isinstance(later.get("warning"), str) and later["warning"]:
            # An epoch after the first that can never be cut ("--min-samples 1000 is more than...").
            parts.append(f"next epoch: {later['warning']}")
        listing = status.get("listing")
        if isinstance(listing, dict) and isinstance(listing.get("warning"), str) and listing["warning"]:
            # Or it lists nothing ("0 objects under s3://b/p for this node: check --remote's prefix").
            parts.append(f"listing: {listing['warning']}")
    return "; ".join(parts)
