"""The folder view's grace: each epoch it shows is recorded as read, and a refused record is tried
again until it is written or no longer matters.

Why: without FUSE nothing sees a reader's lookups or opens, so the publisher pins each epoch it
shows for ``in_use_seconds`` by recording a read of it (docs/folderview.md, "Retirement"). A cut
records no read, so until that record an epoch is kept only by being among the newest
``keep_epochs``: with one more cut the sampler retires it and may evict its objects under a
reader that found the folder a moment ago. The record is a small write that gives way when the
index is busy (the sampler's long write) or full (:meth:`Store.record_read` returns False), so a
refused one stays due and :meth:`Grace.retry` tries it again at every step of the publisher, until
it is written, the store has retired the epoch (nothing left to pin), or the grace would have
ended anyway (written then, it would pin the epoch for a whole grace more).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection

from epochfs.sidecar.store.reader import FolderReader

log = logging.getLogger("epochfs.folderview")


class Grace:
    """The grace records of the epochs the publisher shows, with those still due."""

    def __init__(self, store: FolderReader) -> None:
        self.store = store
        self._due: dict[int, float] = {}  # epoch -> when its grace ends (time.monotonic)

    def due(self) -> list[int]:
        """Epochs whose record the index refused so far, ascending."""
        return sorted(self._due)

    def record(self, n: int) -> bool:
        """Pin epoch ``n`` for ``in_use_seconds`` from now (just before it is shown); True when
        written, else it stays due for :meth:`retry`."""
        self._due[n] = time.monotonic() + self.store.policy().in_use_seconds
        if self.store.record_read(n):
            del self._due[n]
            return True
        log.info("epoch %d: its grace record is tried again at the next steps (the index is busy or full)", n)
        return False

    def retry(self, live: Collection[int], *, tried: Collection[int] = ()) -> None:
        """Try the due records again (``live``: the store's live epochs; ``tried``: epochs whose
        record was refused a moment ago, left for the next step); stops at the first refusal, since
        the others would wait for the same lock."""
        if not self._due:
            return
        now = time.monotonic()
        for n in sorted(self._due):
            if n in tried and n in live:
                continue
            if n not in live:
                del self._due[n]  # retired: nothing to pin
            elif now >= self._due[n]:
                del self._due[n]
                log.warning("epoch %d: its grace record was refused until the grace was over "
                            "(the index stayed busy or full); it is kept as the store decides", n)
            elif self.store.record_read(n):
                del self._due[n]
            else:
                return
