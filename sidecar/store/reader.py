"""What the FUSE view may ask of the store: a narrow, read-mostly interface.

The view lists live epochs and their files, renders ``status.json``, asks for a cut on a lookup of
a new ``epoch-N`` and records reads that keep an epoch pinned. It never admits, evicts or configures,
so it depends on this protocol rather than on :class:`~epochfs.sidecar.store.Store` itself, and a
test can hand it anything that answers these calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from epochfs.sidecar.store.integrity import LostDigest
from epochfs.sidecar.store.records import EpochInfo, FileEntry, Policy, Stats


class EpochReader(Protocol):
    """The store as the FUSE view sees it."""

    objects_dir: Path

    def policy(self) -> Policy: ...

    def stats(self) -> Stats: ...

    def newest_epoch(self) -> int | None: ...

    def epochs(self) -> list[EpochInfo]: ...

    def epoch_files(self, n: int) -> list[FileEntry]: ...

    def iter_epoch_files(self, n: int) -> Iterator[FileEntry]: ...

    def request_cut(self, n: int) -> bool: ...

    def record_read(self, n: int) -> bool: ...

    def lost_samples(self, *, unless: LostDigest | None = None
                     ) -> tuple[LostDigest, list[FileEntry] | None]: ...
