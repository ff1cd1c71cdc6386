"""The immutable folder tree of one epoch: names, symlink targets and attributes, without FUSE.

Split from :mod:`epochfs.fuse.view` (which keeps the changing namespace around it) so that each
module holds one concern: this one turns an epoch's file list into folders and symlinks, with the
path rules (unsafe or clashing paths are skipped) the FUSE view and the folder view share.
"""

from __future__ import annotations

import logging
import stat
from dataclasses import dataclass, field
from pathlib import Path

from epochfs.sidecar.store import FileEntry
from epochfs.torchclient.layout import format_manifest

log = logging.getLogger("epochfs.fuse")

DIR_MODE = stat.S_IFDIR | 0o555
LINK_MODE = stat.S_IFLNK | 0o777
FILE_MODE = stat.S_IFREG | 0o444


class NotFound(LookupError):
    """The path names nothing in the view (the FUSE layer answers ENOENT)."""


class NotADirectory(LookupError):
    """A directory operation on something that is not one (ENOTDIR)."""


class NotALink(LookupError):
    """readlink of something that is not a symlink (EINVAL)."""


@dataclass(frozen=True)
class Attr:
    """What ``stat`` shows for one node; stable for immutable nodes so the kernel keeps its caches."""

    mode: int
    size: int
    mtime: float
    nlink: int = 1

    def to_stat(self, *, uid: int, gid: int) -> dict[str, int]:
        """The ``stat`` fields as mfusepy takes them with ``use_ns`` (times in nanoseconds)."""
        ns = int(self.mtime * 1e9)
        return {
            "st_mode": self.mode,
            "st_size": self.size,
            "st_nlink": self.nlink,
            "st_uid": uid,
            "st_gid": gid,
            "st_mtime": ns,
            "st_ctime": ns,
            "st_atime": ns,
            "st_blocks": (self.size + 511) // 512,
        }

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)


@dataclass
class _Dir:
    """One folder of an epoch tree: child name -> attributes, plus the sorted listing."""

    attr: Attr
    children: dict[str, Attr] = field(default_factory=dict)
    listing: list[tuple[str, Attr]] = field(default_factory=list)


class EpochTree:
    """The immutable folder tree of one epoch, built once from ``Store.epoch_files``."""

    def __init__(self, *, epoch: int, cut_at: float, files: list[FileEntry], link_root: Path) -> None:
        self.epoch = epoch
        self.cut_at = cut_at
        self.files = files
        root_attr = Attr(DIR_MODE, 0, cut_at, 2)
        self.dirs: dict[str, _Dir] = {"": _Dir(root_attr)}
        self.links: dict[str, str] = {}
        self.link_attrs: dict[str, Attr] = {}
        prefix = str(link_root).rstrip("/")
        for f in files:
            parts = f.path.split("/")
            if not f.path or any(p in ("", ".", "..") for p in parts):
                log.warning("epoch %d: skipping unsafe path %r", epoch, f.path)
                continue
            parent = ""
            ok = True
            for part in parts[:-1]:
                here = f"{parent}/{part}" if parent else part
                if here in self.links:
                    ok = False
                    break
                if here not in self.dirs:
                    attr = Attr(DIR_MODE, 0, cut_at, 2)
                    self.dirs[here] = _Dir(attr)
                    self.dirs[parent].children[part] = attr
                parent = here
            if not ok or f.path in self.dirs or f.path in self.links:
                log.warning("epoch %d: %r clashes with another path; not shown", epoch, f.path)
                continue
            target = f"{prefix}/{f.object_name}"
            attr = Attr(LINK_MODE, len(target.encode()), cut_at)
            self.links[f.path] = target
            self.link_attrs[f.path] = attr
            self.dirs[parent].children[parts[-1]] = attr
        for d in self.dirs.values():
            d.listing = sorted(d.children.items())

    def lookup(self, rel: str) -> Attr:
        if rel in self.link_attrs:
            return self.link_attrs[rel]
        d = self.dirs.get(rel)
        if d is None:
            raise NotFound(rel)
        return d.attr

    def listdir(self, rel: str) -> list[tuple[str, Attr]]:
        d = self.dirs.get(rel)
        if d is None:
            if rel in self.links:
                raise NotADirectory(rel)
            raise NotFound(rel)
        return d.listing

    def readlink(self, rel: str) -> str:
        target = self.links.get(rel)
        if target is None:
            if rel in self.dirs:
                raise NotALink(rel)
            raise NotFound(rel)
        return target

    def manifest(self) -> bytes:
        """The manifest of the files shown (skipped paths left out), in the layout's format."""
        rows = [(f.path, f.size, f.checksum) for f in self.files if f.path in self.links]
        return format_manifest(self.epoch, rows).encode()
