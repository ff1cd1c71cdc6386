"""The mount's file layout: names, the epoch-name grammar, the manifest and status formats.

The one definition of what a folder shaped like an epochfs mount holds::

    root/epoch-N/<relative paths>        one folder per live epoch (symlinks to the object files)
    root/latest -> epoch-N               the newest live epoch
    root/.epochfs/status.json            occupancy, epochs, pending cuts (a JSON object)
    root/.epochfs/epoch-N.manifest       the file list of epoch N, in the manifest format below
    root/.epochfs/classes.json           folder -> index of its class folders (labels by folder)

Both sides use it: the FUSE view (:mod:`epochfs.fuse.view`) names epochs, renders ``status.json``
and writes manifests with it; the torch client finds epochs and parses manifests with it. Any folder
with this layout works for the client (a plain folder in tests, the FUSE mount in production);
the client walks one without manifests with :mod:`.epochwalk`.

**Why it lives in the torch client.** The client installs without the sidecar and the FUSE server
and imports nothing from them, so the contract must live on its side; ``fuse`` importing
``epochfs.torchclient.layout`` is the one allowed import from ``fuse`` into ``torchclient``. Keep this
module on the standard library only: ``import epochfs.torchclient.layout`` must not import torch
(``tests/torchclient/test_layout.py`` checks), so the sidecar image and its FUSE server never load it.

**Epoch names.** ``epoch-N`` with N in canonical decimal from 0 to :data:`MAX_EPOCH` (536,870,910:
the FUSE view's inode numbers give each epoch a block of its own, and no more blocks exist; the
store refuses a cut above it, the endpoint and ``epochfs cut`` answer it with the limit):
``0``, or a digit 1-9 followed by at most 8 ASCII digits. ``epoch-007``, ``epoch-+7``,
``epoch-٣`` or ``epoch-1\\n`` name no epoch: each epoch has exactly one name, so the kernel caches
one entry per epoch, one lookup pins it, and a stray name never asks for a cut.

**Manifest, version 1** (UTF-8, read in one pass): a header line
``#epochfs-manifest v1<TAB>epoch=N<TAB>files=M<TAB>bytes=B``, then ``path<TAB>size<TAB>checksum`` per
file (checksum ``<algorithm>:<value>``: ``crc64nvme:<base64>``, ``md5:<hex>``... of verified
bytes, or ``size-only``), sorted by path, each line ending in a newline. Paths never hold a tab
or a newline (the sidecar never admits such keys). A reader refuses another version by name.

**Classes** (``classes.json``): ``{"version": 1, "classes": {root: {name: index}}}``, one map per
folder that holds folders (``"."`` is the epoch's own folder, ``"train"`` is ``epoch-N/train``).
The sidecar keeps the folders of its cache in one list that only grows (sorted at the first
record, later ones appended in sorted order), and a folder's index is its place among its
siblings in that list: the same in every epoch of the cache, never renumbered. Built from that
list by :func:`format_classes`; :func:`read_classes` reads it.

Looking up ``root/epoch-N`` for N above the newest asks the sidecar for a cut; that is why
:func:`epoch_exists` is a plain ``stat`` and never a directory listing of ``root``. A folder the
sidecar publishes (``--view folder``) sees no lookup: the client asks ``POST`` :data:`CUT_PATH`
``?epoch=N`` of the sidecar instead (``torchclient/cutask.py`` asks, ``sidecar/cutrequest.py``
answers).
"""

from __future__ import annotations

import json
import operator
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

CONTROL_DIR = ".epochfs"
STATUS_NAME = "status.json"
CLASSES_NAME = "classes.json"
CLASSES_VERSION = 1
LATEST_NAME = "latest"
EPOCH_PREFIX = "epoch-"
MANIFEST_SUFFIX = ".manifest"
MAX_EPOCH = (1 << 29) - 2
"""The largest epoch number: the FUSE view's inode numbers have a block for each epoch up to it
(``fuse/inodes.py``; an epoch a second would take 17 years to get there). The store keeps the
same number (``sidecar/store/hwm.py``: it imports nothing of the client) and refuses a cut
above it; ``tests/torchclient/test_layout.py`` checks they agree."""
VIEW_REFRESH_SECONDS = 0.5
"""How often the FUSE view reads the store again (its epochs, ``latest``, ``status.json``): how
long a mount may show an epoch that has just retired. The sidecar keeps a retired epoch's files at
least twice this long (its ``--retire-grace``), so no view shows a link whose file is gone."""
MANIFEST_VERSION = 1
MANIFEST_MAGIC = f"#epochfs-manifest v{MANIFEST_VERSION}"
CUT_PATH = "/v1/cut"
"""The sidecar's endpoint that stands in for a lookup of ``epoch-N`` on a published folder."""
REPORT_URL_KEY = "report_url"
"""The field of ``status.json`` naming the sidecar's client-report URL on the pod's loopback
(``http://127.0.0.1:<--health-port>/v1/client-report``), recorded by the sidecar at its start: the
client reports and asks for cuts there when ``EPOCHFS_REPORT_URL`` is unset (absent from an older
sidecar's document: the client's default then)."""
SHARD_KEY = "shard"
"""The field of ``status.json`` naming the keys the sidecar samples: ``{"index": i, "count": c,
"node": "<host>:<cache>"}`` (its ``--shard-index``/``--shard-count`` as its cache records them, and
which sidecar that is). The loaders compare it across the job's nodes at each epoch's start, so two
nodes that would train on the same keys, or split them by different counts, are refused there
(:mod:`.shardcheck`); absent from a plain folder, an older sidecar's document, or before the
sidecar's sampler recorded its shard."""

_NUMBER = r"(0|[1-9][0-9]{0,8})"
_EPOCH_NAME = re.compile(EPOCH_PREFIX + _NUMBER)
_MANIFEST_NAME = re.compile(EPOCH_PREFIX + _NUMBER + re.escape(MANIFEST_SUFFIX))
_MAGIC_PREFIX = "#epochfs-manifest v"


# ---------------------------------------------------------------------------------------- names
def epoch_name(n: int) -> str:
    """``12`` -> ``epoch-12``; ValueError for a number that has no name (negative, above MAX_EPOCH)."""
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_EPOCH:
        raise ValueError(f"epoch numbers are ints from 0 to {MAX_EPOCH}, got {n!r}")
    return f"{EPOCH_PREFIX}{n}"


def parse_epoch_name(name: str) -> int | None:
    """``epoch-12`` -> 12; anything else (``epoch-012``, ``epoch-x``, ``epoch-1.manifest``) -> None."""
    m = _EPOCH_NAME.fullmatch(name)
    return int(m.group(1)) if m and int(m.group(1)) <= MAX_EPOCH else None


def manifest_name(n: int) -> str:
    """``12`` -> ``epoch-12.manifest`` (the file's name inside ``.epochfs/``)."""
    return epoch_name(n) + MANIFEST_SUFFIX


def parse_manifest_name(name: str) -> int | None:
    """``epoch-12.manifest`` -> 12; anything else -> None (same number grammar as epoch names)."""
    m = _MANIFEST_NAME.fullmatch(name)
    return int(m.group(1)) if m and int(m.group(1)) <= MAX_EPOCH else None


def epoch_dir(root: str | os.PathLike[str], epoch: int) -> Path:
    return Path(root) / epoch_name(epoch)


def control_dir(root: str | os.PathLike[str]) -> Path:
    return Path(root) / CONTROL_DIR


def manifest_path(root: str | os.PathLike[str], epoch: int) -> Path:
    return control_dir(root) / manifest_name(epoch)


def status_path(root: str | os.PathLike[str]) -> Path:
    return control_dir(root) / STATUS_NAME


def latest_path(root: str | os.PathLike[str]) -> Path:
    return Path(root) / LATEST_NAME


def classes_path(root: str | os.PathLike[str]) -> Path:
    return control_dir(root) / CLASSES_NAME


# ---------------------------------------------------------------------------------------- manifest
class ManifestError(ValueError):
    """A manifest that does not follow the format; the message names the file and the line."""


class ManifestEntry(NamedTuple):
    """One file of an epoch: its path relative to ``epoch-N/``, its size and checksum
    (``crc64nvme:<base64>``, ``md5:<hex>``..., or ``size-only``).

    A named tuple, so writers may pass plain ``(path, size, checksum)`` tuples where entries are taken
    (the FUSE view does, for every file of a million-file epoch).
    """

    path: str
    size: int
    checksum: str


@dataclass(frozen=True)
class Manifest:
    """The parsed ``.epochfs/epoch-N.manifest``: parallel lists of paths, sizes and checksums.

    Columns rather than one object per file: a million-file manifest parses in well under a second,
    which matters because the loader reads it at every epoch boundary.
    """

    epoch: int
    paths: list[str]
    sizes: list[int]
    checksums: list[str]
    total_bytes: int
    listed: int | None = None
    """Keys of this node's shard the sidecar's listing had seen when the epoch was cut (header
    ``listed=``; None when the header does not say)."""
    estimated: int | None = None
    """About how many keys the remote holds for this shard, as estimated then (``estimated=``):
    an epoch cut while ``listed`` is far below it samples the part listed so far."""

    @property
    def entries(self) -> tuple[ManifestEntry, ...]:
        """One :class:`ManifestEntry` per file (built on demand)."""
        return tuple(map(ManifestEntry, self.paths, self.sizes, self.checksums))


def format_manifest(epoch: int, entries: Iterable[tuple[str, int, str]]) -> str:
    """Manifest text for ``entries`` (sorted here by path): what the FUSE view serves.

    ValueError for a path holding a tab or newline (it would break the format for every reader).
    """
    epoch_name(epoch)  # a number with a name, or ValueError
    ordered = sorted(entries, key=operator.itemgetter(0))
    total = sum(e[1] for e in ordered)
    lines = [f"{MANIFEST_MAGIC}\tepoch={epoch}\tfiles={len(ordered)}\tbytes={total}"]
    lines += [f"{path}\t{size}\t{checksum}" for path, size, checksum in ordered]
    text = "\n".join(lines) + "\n"
    # One pass in C instead of a check per path: the counts hold unless some field holds a separator.
    if text.count("\t") != 3 + 2 * len(ordered) or text.count("\n") != 1 + len(ordered) or "\r" in text:
        for path, _, _ in ordered:
            if any(c in path for c in "\t\n\r"):
                raise ValueError(f"manifest paths cannot hold tabs or newlines: {path!r}")
        raise ValueError("manifest checksums cannot hold tabs or newlines")
    return text


def parse_manifest(text: str, *, source: str, epoch: int | None = None) -> Manifest:
    """Parse manifest text; ``source`` names the file in errors, ``epoch`` (if given) must match."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise ManifestError(f"{source}: empty manifest (no header line)")
    header = lines[0].split("\t")
    if header[0] != MANIFEST_MAGIC:
        if header[0].startswith(_MAGIC_PREFIX):
            raise ManifestError(f"{source}: manifest version {header[0][len(_MAGIC_PREFIX):]!r} is not "
                                f"supported (this client reads v{MANIFEST_VERSION})")
        raise ManifestError(f"{source}: line 1 is not a '{MANIFEST_MAGIC}' header: {lines[0][:80]!r}")
    fields: dict[str, int] = {}
    for item in header[1:]:
        key, sep, value = item.partition("=")
        if not sep or not (value.isascii() and value.isdigit()):
            raise ManifestError(f"{source}: bad header field {item!r}")
        fields[key] = int(value)
    for key in ("epoch", "files", "bytes"):
        if key not in fields:
            raise ManifestError(f"{source}: header lacks {key}=")
    if epoch is not None and fields["epoch"] != epoch:
        raise ManifestError(f"{source}: header says epoch={fields['epoch']}, expected epoch={epoch}")
    body = lines[1:]
    flat = "\t".join(body).split("\t") if body else []
    try:
        if len(flat) != 3 * len(body):
            raise ValueError("wrong number of fields")
        paths, checksums = flat[0::3], flat[2::3]
        sizes = list(map(int, flat[1::3]))
        if "" in paths or (sizes and min(sizes) < 0):
            raise ValueError("empty path or negative size")
    except ValueError as exc:
        _raise_bad_line(body, source)
        raise ManifestError(f"{source}: malformed entries ({exc})") from None
    _refuse_escapes(paths, source)
    total = sum(sizes)
    if len(paths) != fields["files"]:
        raise ManifestError(f"{source}: header says files={fields['files']}, found {len(paths)} lines")
    if total != fields["bytes"]:
        raise ManifestError(f"{source}: header says bytes={fields['bytes']}, entries sum to {total}")
    return Manifest(epoch=fields["epoch"], paths=paths, sizes=sizes, checksums=checksums, total_bytes=total,
                    listed=fields.get("listed"), estimated=fields.get("estimated"))


def _refuse_escapes(paths: list[str], source: str) -> None:
    """A path that leaves ``epoch-N/`` (absolute, or through ``..``) is no file of the epoch: a reader
    would open ``/etc/hostname`` for a sample. One search of the joined paths (a million-file
    manifest is read at every epoch boundary), the line named only once one is found."""
    joined = "\n" + "\n".join(paths) + "\n"
    if "\n/" not in joined and "../" not in joined and "/..\n" not in joined and "\n..\n" not in joined:
        return
    for number, path in enumerate(paths, start=2):
        if path.startswith("/") or ".." in path.split("/"):
            raise ManifestError(f"{source}: line {number}: {path[:80]!r} is not a path inside the epoch "
                                "folder")


def _raise_bad_line(body: list[str], source: str) -> None:
    """Find the first malformed line (the slow way, only once the fast parse failed) and name it."""
    for number, line in enumerate(body, start=2):
        parts = line.split("\t")
        if len(parts) != 3 or not (parts[1].isascii() and parts[1].isdigit()) or not parts[0]:
            raise ManifestError(f"{source}: line {number} is not 'path<TAB>size<TAB>checksum': {line[:80]!r}")


# ---------------------------------------------------------------------------------------- status
def format_status(doc: Mapping[str, Any]) -> str:
    """``status.json``'s text: sorted keys, indented, one trailing newline (stable, diffable)."""
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def parse_status(text: str) -> dict[str, Any] | None:
    """A status document as a dict, or None when the text is not a JSON object."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


# ---------------------------------------------------------------------------------------- classes
ROOT_KEY = "."
"""The key of the epoch folder's own class map in ``classes.json`` (its top-level folders)."""


class ClassesError(ValueError):
    """A ``classes.json`` that does not follow the format; the message names the file."""


def format_classes(folders: Iterable[str]) -> str:
    """``classes.json``'s text for the folder list ``folders`` (relative paths, in the order they
    were recorded, parents before their children): each folder's index is its place among the
    folders of the same parent, so a folder appended later takes the next index of its parent."""
    classes: dict[str, dict[str, int]] = {}
    for folder in folders:
        parent, _, name = folder.rpartition("/")
        siblings = classes.setdefault(parent or ROOT_KEY, {})
        if name not in siblings:
            siblings[name] = len(siblings)
    return json.dumps({"version": CLASSES_VERSION, "classes": classes}, indent=1) + "\n"


def parse_classes(text: str, *, source: str) -> dict[str, dict[str, int]]:
    """``root -> {class folder name -> index}`` from ``classes.json``'s text; ClassesError for
    another version or a broken document (named by ``source``)."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ClassesError(f"{source}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("version") != CLASSES_VERSION:
        version = doc.get("version") if isinstance(doc, dict) else None
        raise ClassesError(f"{source}: classes version {version!r} is not supported "
                           f"(this client reads v{CLASSES_VERSION})")
    classes = doc.get("classes")
    if not isinstance(classes, dict) or not all(
            isinstance(m, dict) and all(isinstance(i, int) and not isinstance(i, bool) for i in m.values())
            for m in classes.values()):
        raise ClassesError(f"{source}: 'classes' must map each folder to {{name: index}}")
    return classes


def read_classes(root: str | os.PathLike[str]) -> dict[str, dict[str, int]] | None:
    """The mount's class maps (``root/.epochfs/classes.json``), or None where there is none."""
    path = classes_path(root)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return parse_classes(text, source=str(path))


# ---------------------------------------------------------------------------------------- a folder
def epoch_exists(root: str | os.PathLike[str], epoch: int) -> bool:
    """Look up ``root/epoch-N``; on the mount this lookup is what asks for the cut of epoch N.

    False also while the mount does not answer (a dead FUSE mount's ENOTCONN, during a restart)."""
    return os.path.isdir(epoch_dir(root, epoch))


def list_epochs(root: str | os.PathLike[str]) -> list[int]:
    """Epoch numbers visible under ``root`` now, ascending (for error messages and progress lines)."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    return sorted(n for n in map(parse_epoch_name, names) if n is not None)


def read_status(root: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The sidecar's ``status.json`` as a dict, or None where there is none (a plain folder)."""
    try:
        text = status_path(root).read_text(encoding="utf-8")
    except (OSError, ValueError):
        return None
    return parse_status(text)


def read_manifest(root: str | os.PathLike[str], epoch: int) -> Manifest | None:
    """The manifest of ``epoch``, or None where the folder has none (then the client walks the folder)."""
    path = manifest_path(root, epoch)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as e:
        raise ManifestError(f"{path}: not UTF-8 text (at byte {e.start})") from None
    return parse_manifest(text, source=str(path), epoch=epoch)

