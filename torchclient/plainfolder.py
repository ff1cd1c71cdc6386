"""Publish epochs into a plain folder with the mount's layout, without a sidecar.

For tests, the examples and the loader benchmark on a machine without FUSE: like the sidecar, each
``epoch-N/<relative path>`` is a symlink to an object file kept elsewhere, and the epoch's manifest
is in place before the epoch folder appears (the folder is built under a temporary name and renamed,
so a reader never sees half an epoch). Not used on a real mount.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping
from pathlib import Path

from .layout import (
    ManifestEntry,
    control_dir,
    epoch_dir,
    format_manifest,
    format_status,
    latest_path,
    manifest_path,
    status_path,
)


def md5_of(path: str | os.PathLike[str]) -> str:
    """``md5:<hex>`` of a file, the checksum format of the manifest."""
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return f"md5:{digest.hexdigest()}"


def publish_epoch(root: str | os.PathLike[str], epoch: int,
                  files: Mapping[str, str | os.PathLike[str]], *, checksums: bool = True) -> Path:
    """Make ``root/epoch-<epoch>/`` hold ``files`` (relative path -> object file) and update ``latest``.

    The manifest is written first, then the folder appears by one rename; ``checksums=False`` writes
    ``md5:`` placeholders instead of hashing (for large benchmark sets). Returns the epoch folder.
    """
    root = Path(root)
    final = epoch_dir(root, epoch)
    if final.exists():
        raise FileExistsError(f"{final} already exists; epochs are immutable")
    entries = []
    for rel, target in files.items():
        target = Path(target).resolve()
        entries.append(ManifestEntry(rel, target.stat().st_size, md5_of(target) if checksums else "md5:"))
    control_dir(root).mkdir(parents=True, exist_ok=True)
    manifest = manifest_path(root, epoch)
    tmp_manifest = manifest.with_suffix(".tmp")
    tmp_manifest.write_text(format_manifest(epoch, entries), encoding="utf-8")
    os.replace(tmp_manifest, manifest)
    staging = root / f".staging-{final.name}"
    staging.mkdir()
    for rel, target in files.items():
        link = staging / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path(target).resolve())
    os.rename(staging, final)
    latest_tmp = root / ".latest.tmp"
    if latest_tmp.is_symlink():
        latest_tmp.unlink()
    latest_tmp.symlink_to(final.name)
    os.replace(latest_tmp, latest_path(root))
    status = {"samples": len(entries), "cache_bytes": sum(e.size for e in entries), "latest_epoch": epoch,
              "pending_cuts": [], "backpressure": False, "mode": "plain-folder", "time": time.time()}
    tmp_status = status_path(root).with_suffix(".tmp")
    tmp_status.write_text(format_status(status), encoding="utf-8")
    os.replace(tmp_status, status_path(root))
    return final
