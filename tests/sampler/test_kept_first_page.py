"""The discovery's first page answers the planner's pages that it covers (sidecar/listing/keptpage.py).

A flat bucket's discovery reads its first page whole; the planner asks small pages of it (100 keys
first, then gallops and splits), and each of those inside that page's range was asked of the remote
again. The pages answered from memory must be exactly the remote's: the same keys, resume point and
end, for any span over the root, so the listing is the same with fewer requests.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from sampler_helpers import index_rows

from epochfs.sidecar.listing import Lister, paged
from epochfs.sidecar.listing.keptpage import KeptPage
from epochfs.sidecar.listing.paged import PagedSource
from epochfs.sidecar.listing.span import Page, Span
from epochfs.sidecar.remote import ListedPage, RemoteError
from epochfs.sidecar.remote.testing import PagedMemoryRemote
from epochfs.sidecar.store import Store

KEYS = {f"k{i:04d}": b"x" for i in range(0, 6000, 2)}
"""3,000 flat keys (even numbers: a split or a resume point can fall between two keys)."""


@pytest.fixture(autouse=True)
def one_delimiter_page(monkeypatch: pytest.MonkeyPatch) -> None:
    """The discovery reads its first page and one delimiter page: the first 2,000 keys
    (k0000-k3998) are kept, not the whole remote."""
    monkeypatch.setattr(paged, "DISCOVERY_PAGES", 1)


def source_after_discovery(page: int) -> tuple[PagedSource, PagedMemoryRemote, int]:
    remote = PagedMemoryRemote(KEYS, page=page)
    source = PagedSource(remote)
    assert source.spans() == [Span("", "", None)]
    return source, remote, len(remote.pages_asked)


def remote_page(span: Span, after: str, max_keys: int) -> Page:
    """The same page asked of a fresh remote (no kept page)."""
    return PagedSource(PagedMemoryRemote(KEYS, page=1000)).read_page(span, after, max_keys)


def test_pages_inside_the_first_page_are_answered_without_a_request() -> None:
    source, remote, asked = source_after_discovery(1000)  # kept: k0000-k3998
    page = source.read_page(Span("", "", None), "", 100)
    assert (len(page.objects), page.after, page.done) == (100, "k0198", False)
    page = source.read_page(Span("", "", None), "k0198", 200)
    assert [o.key for o in page.objects][:1] == ["k0200"] and len(page.objects) == 200
    page = source.read_page(Span("", "k0501", "k0601"), "", 1000)  # a split inside it: ends at its stop
    assert [o.key for o in page.objects] == [f"k{i:04d}" for i in range(502, 601, 2)] and page.done
    assert len(remote.pages_asked) == asked, "no request for keys the first page holds"
    page = source.read_page(Span("", "k1999", "k2301"), "", 1000)  # past the first page's end
    assert [o.key for o in page.objects] == [f"k{i:04d}" for i in range(2000, 2301, 2)] and page.done
    page = source.read_page(Span("", "", None), "k3900", 100)  # up to its end: a shorter page
    assert (len(page.objects), page.after, page.done) == (49, "k3998", False)
    assert len(remote.pages_asked) == asked
    page = source.read_page(Span("", "", None), "k3998", 100)  # past its end: asked of the remote
    assert len(remote.pages_asked) == asked + 1
    assert page == remote_page(Span("", "", None), "k3998", 100)


def walk(source: PagedSource, span: Span, after: str, max_keys: int) -> list[str]:
    keys: list[str] = []
    while True:
        page = source.read_page(span, after, max_keys)
        assert page.done or page.after != after, "a page that is not the last moves the listing on"
        keys += [str(o.key) for o in page.objects]
        if page.done:
            return keys
        after = page.after


@pytest.mark.parametrize("seed", range(5))
def test_every_page_answered_from_memory_is_the_start_of_the_remote_s_own(seed: int) -> None:
    """Any span over the root, any resume point and page size: a page answered from memory holds
    the remote's page's first keys (all of them, or those up to the kept page's end, then not the
    last), and walked to its end the span lists the remote's keys, each once."""
    rng = random.Random(seed)
    names = sorted(KEYS)
    for _ in range(40):
        source, _remote, _ = source_after_discovery(1000)
        start = rng.choice(["", *names[:2200]])
        stop = rng.choice([None, *(n for n in names if n > start)])
        inside = [n for n in names[:2100] if start < n and (stop is None or n < stop)]
        after = rng.choice(["", start, *inside[:3]])
        span, max_keys = Span("", start, stop), rng.choice([7, 100, 400, 1000])
        ours, theirs = source.read_page(span, after, max_keys), remote_page(span, after, max_keys)
        assert ours.objects == theirs.objects[:len(ours.objects)], (span, after, max_keys)
        assert ours == theirs or (not ours.done and str(ours.objects[-1].key) == names[1999])
        fresh = PagedSource(PagedMemoryRemote(KEYS, page=1000))
        assert walk(source, span, after, max_keys) == walk(fresh, span, after, max_keys)


def test_the_listing_of_a_flat_bucket_asks_no_key_of_the_first_page_again(tmp_path: Path) -> None:
    """The lister as the sampler runs it: every key cataloged; before, five of its nine LISTs were
    for keys of the first page."""
    remote = PagedMemoryRemote(KEYS, page=1000)
    store = Store(tmp_path / "cache", create=True)
    try:
        source = PagedSource(remote)
        lister = Lister(store, source, seed=0)
        report = lister.run(prepared=lister.prepare())
        assert report.complete and report.added == len(KEYS)
    finally:
        store.close()
    discovery = remote.pages_asked[:2]  # the first page, and the delimiter's look after it
    assert discovery == [("", "", None), ("", "k1998", None)]
    again = [p for p in remote.pages_asked[2:] if p[2] is None and p[1] < "k3998"]
    assert again == [], f"keys the discovery's pages listed asked again: {again}"


def test_a_page_out_of_order_answers_nothing_from_memory() -> None:
    from epochfs.sidecar.remote import RemoteObject

    kept = KeptPage([RemoteObject("b", 1, ""), RemoteObject("a", 1, "")], whole=True)
    assert kept.page("", "", None, "", 10) is None


class FailingFrom(PagedMemoryRemote):
    """The in-memory remote, every LIST failing while ``listing_down`` is set (an outage mid-listing)."""

    listing_down = False

    def list_page(self, prefix: str, **kwargs: Any) -> ListedPage:
        if self.listing_down:
            raise RemoteError("the remote is down")
        return super().list_page(prefix, **kwargs)


def test_a_listing_resumed_after_a_failure_asks_the_remote_again(tmp_path: Path) -> None:
    """A run that fails is resumed (the listing thread's retry, same process, same source): the
    first page was read when the listing began, so what is left of its range is asked of the remote,
    which has changed meanwhile (a key added inside that range, one after it deleted)."""
    remote = FailingFrom(dict(KEYS), page=1000)
    store = Store(tmp_path / "cache", create=True)
    try:
        lister = Lister(store, PagedSource(remote), seed=0, threads=1)
        prepared = lister.prepare()
        remote.listing_down = True
        with pytest.raises(RemoteError):
            lister.run(prepared=prepared)
        remote.objects["k0999"] = b"x"  # an odd number: inside the first page's range, new
        del remote.objects["k1500"]
        remote.listing_down = False
        report = lister.run()
        assert report.complete
        listed = {str(r[0]) for r in index_rows(tmp_path / "cache", "SELECT key FROM catalog")}
        assert "k0999" in listed, "a key added inside the first page's range while the listing waited"
        assert "k1500" not in listed, "a key deleted while the listing waited"
    finally:
        store.close()
