"""The epochs of a cache folder as :class:`~epochfs.sidecar.store.cache.Store` shows them: cuts
and their requests, retirement, the files of live epochs, and the admission order a reader follows
to build the next epoch before it is cut.

:class:`StoreEpochs` is the base class of ``Store`` that holds these methods, each one rule of
:mod:`.epochs`, :mod:`.memberview` or :mod:`.admitted` applied to the store's index and policy.
Apart from the facade because they are one concern of their own (what the FUSE view and the folder
view ask of a cache, where the rest of ``Store`` is what the sampler writes), and so that the
facade stays a module read in one sitting. The base takes the index and the policy from ``Store``
(:attr:`_ix`, :meth:`policy`), which owns them.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from pathlib import Path

from epochfs.sidecar.store import admitted, ahead, epochpins, epochs, memberview, windows
from epochfs.sidecar.store.index import Index, Meta
from epochfs.sidecar.store.records import EpochInfo, FileEntry, Policy


class StoreEpochs(ABC):
    """The epoch side of a cache folder's :class:`~epochfs.sidecar.store.cache.Store` (its base)."""

    root: Path
    """The cache folder (its members files answer while the index is damaged)."""

    @property
    @abstractmethod
    def _ix(self) -> Index:
        """The index, as the store follows it through its handle."""

    @abstractmethod
    def policy(self) -> Policy:
        """The cache rules recorded in the index, which the cut condition and retirement read."""

    def cut_ready(self, n: int) -> bool:
        """``epoch-n`` can be served now: it is live, or it could be cut at once."""
        return epochs.cut_ready(self._ix, self.policy(), n)

    def cut(self, n: int | None = None, *, force: bool = False, far: bool = False) -> int | None:
        """Cut epoch ``n`` (default newest + 1) if its condition holds, or ignoring it with
        ``force``; ``far``: a jump of more than MAX_JUMP epochs; returns n, else None (see
        :func:`epochs.cut`)."""
        return epochs.cut(self._ix, self.policy(), n, force=force, far=far)

    def window_span(self, n: int) -> windows.Span | None:
        """Schedule mode: epoch ``n``'s window as its cut condition counts it (``epochfs cut``'s
        refusal names what it lacks); None in snapshot mode or before the first complete listing,
        whose order windows are positions of."""
        policy = self.policy()
        if policy.schedule is None or self._ix.get(Meta.LISTING_COMPLETE) is None:
            return None
        with self._ix.read() as db:
            return ahead.fetch(db, policy, n) or windows.scan(db, policy, n)

    def request_cut(self, n: int) -> bool:
        return epochs.request_cut(self._ix, self.policy(), n)

    def request_cut_made(self, n: int) -> tuple[bool, bool]:
        """:meth:`request_cut`, and whether this call made the cut (:func:`.epochs.request_cut_made`)."""
        return epochs.request_cut_made(self._ix, self.policy(), n)

    def pending_cuts(self) -> list[tuple[int, float]]:
        return epochs.pending_cuts(self._ix)

    def process_cut_requests(self) -> list[tuple[int, float]]:
        return epochs.process_cut_requests(self._ix, self.policy())

    def arrived_since_newest(self) -> bool:
        """:func:`.admitted.arrived_since_newest`."""
        return admitted.arrived_since_newest(self._ix)

    def next_window_adds(self) -> bool | None:
        """Schedule mode: the next window would hold a sample the newest epoch does not; None in
        snapshot mode (:func:`.epochs.next_window_adds`)."""
        return epochs.next_window_adds(self._ix, self.policy())

    def retire(self, *, now: float | None = None) -> list[int]:
        return epochs.retire(self._ix, self.policy(), now=now)

    def retired_in_grace(self, *, now: float | None = None) -> bool:
        """An epoch retired within the retire grace still holds samples (:func:`.epochpins.in_grace`)."""
        return epochpins.in_grace(self._ix, self.policy(), now=now)

    # While the index is damaged these answer from the members files (:mod:`.memberview`).
    def newest_epoch(self) -> int | None:
        return memberview.or_files(lambda: epochs.newest(self._ix), lambda: memberview.newest(self.root))

    def epochs(self) -> list[EpochInfo]:
        return memberview.or_files(lambda: epochs.listing(self._ix), lambda: memberview.listing(self.root))

    def epoch_files(self, n: int) -> list[FileEntry]:
        return memberview.or_files(lambda: epochs.files(self._ix, n), lambda: memberview.files(self.root, n))

    def iter_epoch_files(self, n: int) -> Iterator[FileEntry]:
        """:meth:`epoch_files` streamed in chunks (KeyError at the first step when ``n`` is not
        live): the FUSE view builds a 1M-file tree without a list of them."""
        return memberview.iter_or_files(self.root, n, epochs.iter_files(self._ix, n))

    def samples_after(self, after_id: int, *, limit: int) -> list[admitted.AdmittedSample]:
        """Samples admitted after id ``after_id``, in admission order (at most ``limit``); with
        :meth:`sample_id_bounds` and :meth:`epoch_extent`, what a reader needs to follow the next
        snapshot-mode cut before it is made (the folder view builds its tree ahead, :mod:`.admitted`)."""
        return admitted.samples_after(self._ix, after_id, limit)

    def sample_id_bounds(self) -> tuple[int, int]:
        """The lowest and highest sample ids held, (0, 0) when empty: the front the oldest samples
        leave by, and the admission order's end (lower than before: the index was replaced)."""
        return admitted.id_bounds(self._ix)

    def epoch_extent(self, n: int) -> admitted.EpochExtent | None:
        """Live epoch ``n`` as a range of the admission order (its row's ends, count and bytes);
        None for schedule-mode windows, epochs listed row by row and epochs not live."""
        return admitted.epoch_extent(self._ix, n)

    def admitted_windows(self) -> admitted.WindowReads:
        """The reads that follow schedule mode's next window as :meth:`samples_after` and
        :meth:`epoch_extent` follow the next snapshot cut (the folder view builds it ahead)."""
        return admitted.WindowReads(lambda: self._ix, self.policy)

    def record_read(self, n: int, *, now: float | None = None) -> bool:
        """Keep epoch ``n`` pinned for the in-use window; False when the index could not take the
        write now (busy or full): the caller tries again later."""
        return epochs.record_read(self._ix, n, now=now)

    def record_reads(self, ns: Sequence[int], *, now: float | None = None) -> bool:
        """:meth:`record_read` of several epochs in one write."""
        return epochs.record_reads(self._ix, ns, now=now)

    def epochs_opened(self, sids: Sequence[str]) -> set[int]:
        """The epochs a reader that opened the object files ``sids`` by their resolved paths reads
        (:func:`.epochpins.epochs_read`), for the read records that keep them in use."""
        return epochs.opened_epochs(self._ix, self.policy(), sids)
