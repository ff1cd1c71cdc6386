"""Publish epochs into a plain folder with the mount's layout, without a sidecar.

For tests, the examples and the loader benchmark on a machine without FUSE: like the sidecar, each
``epoch-N/<relative path>`` is a symlink to an object file kept elsewhere, and the epoch's manifest
is in place before the epoch folder appears. The steps (temp + fsync + rename, a tree built under a
temporary name and shown by one rename, ``latest`` and ``status.json`` replaced) are the folder
view's own, from :mod:`.publish`, so a reader never sees half an epoch here either. Only the
modes differ: folders ``0755`` and files the process's default, not the view's read-only ones, so
that tests and examples may change and remove them. Not used on a real mount.
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
from .publish import folders_of, publish_tree, replace_file, replace_symlink

HASH_BLOCK = 1 << 20
"""Bytes read at a time to hash a file: the sidecar's ``BLOCK``, which the torch client may not
import (it installs without the sidecar)."""


def md5_of(path: str | os.PathLike[str]) -> str:
    """``md5:<hex>`` of a file, the checksum format of the manifest."""
    digest = hashlib.md5()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_BLOCK):
            digest.update(chunk)
    return f"md5:{digest.hexdigest()}"


def publish_epoch(root: str | os.PathLike[str], epoch: int,
                  files: Mapping[str, str | os.PathLike[str]], *, checksums: bool = True) -> Path:
    """Make ``root/epoch-<epoch>/`` hold ``files`` (relative path -> object file) and update ``latest``.

    The manifest is written (and fsynced) first, then the folder appears by one rename, then
    ``latest`` and ``status.json`` are replaced; ``checksums=False`` writes
    ``md5:`` placeholders instead of hashing (for large benchmark sets). Returns the epoch folder.
    """
    root = Path(root)
    final = epoch_dir(root, epoch)
    if final.exists():
        raise FileExistsError(f"{final} already exists; epochs are immutable")
    links = {rel: str(Path(target).resolve()) for rel, target in files.items()}
    entries = [ManifestEntry(rel, os.stat(target).st_size, md5_of(target) if checksums else "md5:")
               for rel, target in links.items()]
    control_dir(root).mkdir(parents=True, exist_ok=True)
    replace_file(manifest_path(root, epoch), format_manifest(epoch, entries).encode(), fsync=True)
    publish_tree(final, folders_of(links), links, 0o755)
    replace_symlink(latest_path(root), final.name)
    status = {"samples": len(entries), "cache_bytes": sum(e.size for e in entries), "latest_epoch": epoch,
              "pending_cuts": [], "backpressure": False, "mode": "plain-folder", "time": time.time()}
    replace_file(status_path(root), format_status(status).encode(), fsync=False)
    return final
