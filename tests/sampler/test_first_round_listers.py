"""The listing's first pages on more listers (sidecar/listing/lister.py, FIRST_ROUND_LISTERS).

The first round's first pages (a 100-key page of every span) are small pages whose round trips
bound them: over 2,000 folders four listers took 8-9 s, and the epochs cut meanwhile drew from
what the round had reached. With more spans than ``--list-threads``, extra listers read those
first pages, nothing else, and end once every span's is taken; the rest of the listing runs on
``--list-threads`` listers, as before.
"""

from __future__ import annotations

import threading
from pathlib import Path

from epochfs.sidecar.listing import Lister
from epochfs.sidecar.listing.lister import FIRST_ROUND_LISTERS
from epochfs.sidecar.listing.paged import PagedSource
from epochfs.sidecar.remote.base import ListedPage
from epochfs.sidecar.remote.testing import PagedMemoryRemote
from epochfs.sidecar.store import Store


class _InFlight(PagedMemoryRemote):
    """Pages that take a round trip (10 ms), counting how many are read at once and which pages
    each thread read."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        super().__init__(objects, page=10)
        self.now = 0
        self.most = 0
        self.read: list[tuple[str, str, str, str | None]] = []
        """(thread, prefix, start after, token) of every page read without the delimiter."""
        self._lock = threading.Lock()

    def list_page(self, prefix: str, **kwargs: object) -> ListedPage:
        if kwargs.get("delimiter"):
            return super().list_page(prefix, **kwargs)  # type: ignore[arg-type]
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.read.append((threading.current_thread().name, prefix,
                              str(kwargs.get("start_after") or ""), kwargs.get("token")))  # type: ignore[arg-type]
        try:
            threading.Event().wait(0.01)
            return super().list_page(prefix, **kwargs)  # type: ignore[arg-type]
        finally:
            with self._lock:
                self.now -= 1


def _run(remote: _InFlight, tmp_path: Path, **kwargs: object) -> None:
    store = Store(tmp_path / "cache", create=True)
    try:
        report = Lister(store, PagedSource(remote), seed=0, threads=4, **kwargs).run()  # type: ignore[arg-type]
        assert report.complete and report.total == len(remote.objects)
    finally:
        store.close()


def test_the_first_pages_run_on_more_listers_which_read_nothing_else(tmp_path: Path) -> None:
    remote = _InFlight({f"c{c:03d}/{i:03d}": b"x" for c in range(80) for i in range(25)})  # a span each
    _run(remote, tmp_path)
    assert 4 < remote.most <= FIRST_ROUND_LISTERS, "the first pages read on more than --list-threads"
    extra = [page for page in remote.read if page[0].startswith("lister-first-")]
    assert extra, "the extra listers read some of the first pages"
    assert all(start == "" and token is None for _, _, start, token in extra), \
        "an extra lister reads a span's first page, nothing else"
    assert len({prefix for _, prefix, _, _ in extra}) == len(extra), "each span's first page once"
    later = [page for page in remote.read if page[2] or page[3]]
    assert later and all(name.startswith("lister-") and not name.startswith("lister-first-")
                         for name, _, _, _ in later), "the rest on --list-threads listers"


def test_no_extra_listers_over_no_more_spans_than_threads_nor_for_full_pages(tmp_path: Path) -> None:
    remote = _InFlight({f"c{c:03d}/{i:03d}": b"x" for c in range(3) for i in range(40)})
    _run(remote, tmp_path)
    assert remote.most <= 4
    many = _InFlight({f"c{c:03d}/{i:03d}": b"x" for c in range(60) for i in range(5)})
    _run(many, tmp_path / "index", full_pages=True)  # epochfs index: --list-threads bounds its rate
    assert many.most <= 4
