"""The mount's file layout, the only thing the client knows about epochfs.

    root/epoch-N/<relative paths>        one folder per epoch (symlinks to the object files)
    root/latest -> epoch-N
    root/.epochfs/status.json            occupancy, epochs, pending cuts
    root/.epochfs/epoch-N.manifest       the file list of epoch N

The client never imports the sidecar or the FUSE server: any folder with this layout works (a plain
folder in tests, the FUSE mount in production). Looking up ``root/epoch-N`` for N above the newest asks
the sidecar for a cut; that is why :func:`epoch_exists` is a plain ``stat`` and never a directory
listing of ``root``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST_MAGIC = "#epochfs-manifest v1"
_EPOCH_DIR = re.compile(r"^epoch-(\d+)$")


class ManifestError(ValueError):
    """A manifest that does not follow the v1 format; the message names the file and the line."""


@dataclass(frozen=True)
class ManifestEntry:
    """One file of an epoch: its path relative to ``epoch-N/``, its size and checksum (``md5:<hex>``)."""

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

    @property
    def entries(self) -> tuple[ManifestEntry, ...]:
        """One :class:`ManifestEntry` per file (built on demand)."""
        return tuple(map(ManifestEntry, self.paths, self.sizes, self.checksums))


def epoch_dir(root: str | os.PathLike[str], epoch: int) -> Path:
    return Path(root) / f"epoch-{epoch}"


def manifest_path(root: str | os.PathLike[str], epoch: int) -> Path:
    return Path(root) / ".epochfs" / f"epoch-{epoch}.manifest"


def status_path(root: str | os.PathLike[str]) -> Path:
    return Path(root) / ".epochfs" / "status.json"


def epoch_exists(root: str | os.PathLike[str], epoch: int) -> bool:
    """Look up ``root/epoch-N``; on the mount this lookup is what asks for the cut of epoch N."""
    return epoch_dir(root, epoch).is_dir()


def list_epochs(root: str | os.PathLike[str]) -> list[int]:
    """Epoch numbers visible under ``root`` now, ascending (for error messages and progress lines)."""
    try:
        names = os.listdir(root)
    except OSError:
        return []
    found = []
    for name in names:
        match = _EPOCH_DIR.match(name)
        if match:
            found.append(int(match.group(1)))
    return sorted(found)


def read_status(root: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The sidecar's ``status.json`` as a dict, or None where there is none (a plain folder)."""
    try:
        data = json.loads(status_path(root).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def parse_manifest(text: str, *, source: str, epoch: int | None = None) -> Manifest:
    """Parse manifest text; ``source`` names the file in errors, ``epoch`` (if given) must match."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise ManifestError(f"{source}: empty manifest (no header line)")
    header = lines[0].split("\t")
    if header[0] != MANIFEST_MAGIC:
        raise ManifestError(f"{source}: line 1 is not a '{MANIFEST_MAGIC}' header: {lines[0][:80]!r}")
    fields: dict[str, int] = {}
    for item in header[1:]:
        key, sep, value = item.partition("=")
        if not sep or not value.isdigit():
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
    total = sum(sizes)
    if len(paths) != fields["files"]:
        raise ManifestError(f"{source}: header says files={fields['files']}, found {len(paths)} lines")
    if total != fields["bytes"]:
        raise ManifestError(f"{source}: header says bytes={fields['bytes']}, entries sum to {total}")
    return Manifest(epoch=fields["epoch"], paths=paths, sizes=sizes, checksums=checksums, total_bytes=total)


def _raise_bad_line(body: list[str], source: str) -> None:
    """Find the first malformed line (the slow way, only once the fast parse failed) and name it."""
    for number, line in enumerate(body, start=2):
        parts = line.split("\t")
        if len(parts) != 3 or not parts[1].isdigit() or not parts[0]:
            raise ManifestError(f"{source}: line {number} is not 'path<TAB>size<TAB>checksum': {line[:80]!r}")


def read_manifest(root: str | os.PathLike[str], epoch: int) -> Manifest | None:
    """The manifest of ``epoch``, or None where the folder has none (then the client walks the folder)."""
    path = manifest_path(root, epoch)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return parse_manifest(text, source=str(path), epoch=epoch)


def format_manifest(epoch: int, entries: list[ManifestEntry]) -> str:
    """Manifest text for ``entries`` (sorted here by path), the exact format the sidecar writes."""
    ordered = sorted(entries, key=lambda e: e.path)
    for entry in ordered:
        if any(c in entry.path for c in "\t\n\r"):
            raise ValueError(f"manifest paths cannot hold tabs or newlines: {entry.path!r}")
    total = sum(e.size for e in ordered)
    lines = [f"{MANIFEST_MAGIC}\tepoch={epoch}\tfiles={len(ordered)}\tbytes={total}"]
    lines += [f"{e.path}\t{e.size}\t{e.checksum}" for e in ordered]
    return "\n".join(lines) + "\n"


def walk_epoch(root: str | os.PathLike[str], epoch: int) -> list[tuple[str, int]]:
    """(relative path, size) of every file under ``epoch-N/``, sorted by path: the fallback without manifest.

    Entries are usually symlinks to the object files, so sizes come from ``stat`` (which follows them).
    """
    base = epoch_dir(root, epoch)
    found: list[tuple[str, int]] = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, base)
        for name in filenames:
            rel = name if rel_dir == "." else f"{rel_dir}/{name}".replace(os.sep, "/")
            found.append((rel, os.stat(os.path.join(dirpath, name)).st_size))
    found.sort()
    return found
