"""What the view may ask of the store: :class:`EpochReader`, the one store interface of the view
(:class:`FolderReader` adds what the folder view's parts read to build ahead).

Three readers of the store serve what a trainer sees: the FUSE view (``epochfs.fuse``: the
namespace, lookups, read records, the in-use window), the folder view that writes the same
namespace down (it renders it through ``epochfs.fuse.view.View``), and the answer to ``POST
/v1/cut?epoch=N`` (``epochfs.sidecar.cutrequest``, the folder view's stand-in for a lookup). They
list live epochs and their files, render ``status.json``, ask for a cut of a new epoch (a lookup,
a request) and record reads that keep an epoch pinned. None of them admits, evicts, retires or
configures, so they are typed against this protocol rather than against
:class:`~epochfs.sidecar.store.Store` itself: mypy then refuses a call outside it (a view that
starts evicting would have to say so here), and a test can hand them anything that answers these
calls.

The folder view's parts (``epochfs.sidecar.folderview_*``) ask a little more, and are typed
against :class:`FolderReader`, this protocol and those calls: the reads that follow the admission
order, so the next epoch's tree is built before its cut (:mod:`.admitted`), and the one value it
writes, why publishing is paused (``Meta.PUBLISH_PAUSED``: status, ``/v1/cut`` and the metrics
show it). Only the process that runs them (``epochfs.sidecar.folderview``) opens the
:class:`~epochfs.sidecar.store.Store` itself.

One protocol for these three readers, not one per caller: a lookup of ``epoch-N`` and a cut
request are the same question (the store's ``request_cut_made``, the read record that pins an
epoch), asked by the FUSE view and, for a published folder, over HTTP; a narrower interface per
caller would only repeat these lines. Each member is one the view or the cut request calls today.
:class:`FolderReader` is apart because what it adds builds epochs ahead of their cut, which no
other reader does.

The class-folder list behind ``classes.json`` (``epochfs.fuse.classes``) is in it too: recording
a folder appends to that list under the index's write transaction, and the store does that
itself (:mod:`epochfs.sidecar.store.classes`), so the view asks, as for a cut.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Protocol

from epochfs.sidecar.store.admitted import AdmittedSample, EpochExtent, WindowReads
from epochfs.sidecar.store.classes import ClassFolders
from epochfs.sidecar.store.index import Meta
from epochfs.sidecar.store.integrity import LostDigest
from epochfs.sidecar.store.records import EpochInfo, FileEntry, Policy, Stats


class EpochReader(Protocol):
    """The store as the view and the cut request see it."""

    root: Path
    """The cache's folder (``classes.json``'s list is read from it: :func:`.classes.read`)."""

    # ------------------------------------------------------------------ reading
    def policy(self) -> Policy:
        """The in-use window lives here (``fuse.inuse`` follows it)."""
        ...

    def stats(self) -> Stats:
        """What ``status.json`` shows."""
        ...

    def meta(self, key: Meta) -> str | None:
        """A recorded value (the sampler's retry line in ``status.json``)."""
        ...

    def newest_epoch(self) -> int | None: ...

    def next_epoch(self) -> int:
        """The number the next cut takes (above the high-water mark after an index reset)."""
        ...

    def epochs(self) -> list[EpochInfo]: ...

    def iter_epoch_files(self, n: int) -> Iterator[FileEntry]:
        """Epoch ``n``'s files in path order, streamed (a million-file epoch is never one list)."""
        ...

    def lost_samples(self, *, unless: LostDigest | None = None
                     ) -> tuple[LostDigest, list[FileEntry] | None]:
        """Samples marked lost, read only when their digest differs from ``unless``."""
        ...

    # ------------------------------------------------------------------ cuts and reads
    def pending_cuts(self) -> list[tuple[int, float]]:
        """Queued cut requests (epoch, when queued): the wait a cut ends is reported."""
        ...

    def request_cut_made(self, n: int) -> tuple[bool, bool]:
        """A lookup's (or a request's) cut of ``n`` by the store's rule: (live now, cut by this call)."""
        ...

    def cut(self, n: int) -> int | None:
        """An explicit jump to epoch ``n`` (``POST /v1/cut?epoch=N&jump=1``); None: not yet."""
        ...

    def record_read(self, n: int, *, now: float | None = None) -> bool:
        """Epoch ``n`` was read (at ``now``, the time by default): it stays pinned for the in-use
        window from then."""
        ...

    # ------------------------------------------------------------------ class folders
    def record_class_folders(self, found: Iterable[str], *, through: int | None = None,
                             wait: float | None = None) -> ClassFolders:
        """Append folders to the class list; ``through``: the newest epoch whose folders these are;
        ``wait``: a reader's record, the write lock asked for in bounded tries for that long."""
        ...

    def listed_class_folders(self) -> list[str]:
        """The running listing's folders (recorded as soon as a listing begins)."""
        ...

    def cataloged_class_folders(self) -> list[str]:
        """The folders of the keys listed so far (the first record, when discovery named none)."""
        ...

    def listing_mark(self) -> tuple[int, int]:
        """Changes when a listing begins or splits (the view records its folders then)."""
        ...


class FolderReader(EpochReader, Protocol):
    """The store as the folder view's parts see it: :class:`EpochReader` and what building the
    next epoch ahead reads (:mod:`epochfs.sidecar.folderview_ahead`,
    :mod:`epochfs.sidecar.folderview_window`), and the pause it records."""

    # ------------------------------------------------------------------ the next epoch, ahead
    def samples_after(self, after_id: int, *, limit: int) -> list[AdmittedSample]:
        """Samples admitted after id ``after_id``, in admission order (at most ``limit``)."""
        ...

    def sample_id_bounds(self) -> tuple[int, int]:
        """The lowest and highest sample ids held, (0, 0) when empty."""
        ...

    def epoch_extent(self, n: int) -> EpochExtent | None:
        """Live snapshot-mode epoch ``n`` as a range of the admission order; None otherwise."""
        ...

    def admitted_windows(self) -> WindowReads:
        """The same reads for schedule mode's next window."""
        ...

    # ------------------------------------------------------------------ the one write
    def set_meta(self, key: Meta, value: str | None) -> None:
        """Record (None: clear) why publishing is paused (``Meta.PUBLISH_PAUSED``)."""
        ...
