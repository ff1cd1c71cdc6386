"""The listing's first round on more listers (sidecar/listing/lister.py, FIRST_ROUND_LISTERS).

The first round (a page of every span, then each span's end) is small pages whose round trips
bound it: over 2,000 folders four listers took 8-9 s, and the epochs cut meanwhile drew from what
the round had reached. With more spans than ``--list-threads``, extra listers read it and end
with it; the rest of the listing runs on ``--list-threads`` listers, as before.
"""

from __future__ import annotations

import threading
from pathlib import Path

from epochfs.sidecar.listing import Lister
from epochfs.sidecar.listing.lister import FIRST_ROUND_LISTERS
from epochfs.sidecar.listing.sources import PagedSource
from epochfs.sidecar.remote.base import ListedPage
from epochfs.sidecar.remote.testing import PagedMemoryRemote
from epochfs.sidecar.store import Store


class _InFlight(PagedMemoryRemote):
    """Pages that take a round trip (10 ms), counting how many are read at once, and by whom once
    the first round is over."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        super().__init__(objects, page=10)
        self.lister: Lister | None = None
        self.now = 0
        self.most = 0
        self.after_round: list[str] = []
        self._lock = threading.Lock()

    def list_page(self, prefix: str, **kwargs: object) -> ListedPage:
        if kwargs.get("delimiter"):
            return super().list_page(prefix, **kwargs)  # type: ignore[arg-type]
        planner = self.lister.planner if self.lister is not None else None
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
            if planner is not None and planner.first_round_over:
                self.after_round.append(threading.current_thread().name)
        try:
            threading.Event().wait(0.01)
            return super().list_page(prefix, **kwargs)  # type: ignore[arg-type]
        finally:
            with self._lock:
                self.now -= 1


def test_the_first_round_runs_on_more_listers_which_end_with_it(tmp_path: Path) -> None:
    remote = _InFlight({f"c{c:03d}/{i:03d}": b"x" for c in range(120) for i in range(25)})
    store = Store(tmp_path / "cache", create=True)
    try:
        lister = Lister(store, PagedSource(remote), seed=0, threads=4)
        remote.lister = lister
        report = lister.run()
        assert report.complete and report.total == 120 * 25
    finally:
        store.close()
    assert remote.most > 4, "the first round read on more than --list-threads listers"
    assert remote.most <= FIRST_ROUND_LISTERS
    late = [name for name in remote.after_round if name.startswith("lister-first-")]
    assert len(late) <= FIRST_ROUND_LISTERS - 4, "the extra listers end with the round"
    assert len(remote.after_round) > len(late), "the listing goes on after the round"


def test_no_extra_listers_where_the_spans_are_no_more_than_the_threads(tmp_path: Path) -> None:
    remote = _InFlight({f"c{c:03d}/{i:03d}": b"x" for c in range(3) for i in range(40)})
    store = Store(tmp_path / "cache", create=True)
    try:
        lister = Lister(store, PagedSource(remote), seed=0, threads=4)
        remote.lister = lister
        assert lister.run().complete
    finally:
        store.close()
    assert remote.most <= 4
