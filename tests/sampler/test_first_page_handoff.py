"""The discovery's first page is the listing's first page (sidecar/listing/sources.py, process.py).

A flat remote of more than one page (the fetch benchmark's 1,500 objects of 64 KiB) used to be
listed from its first key three times before the first object GET: the discovery's first page,
the delimiter's first page (the same keys), and the listing process's first page. Each is a LIST
request of 1,000 keys (on moto, tenths of a second of its CPU), and the sampler has nothing to
fetch before the catalog's first page is committed. Now:

- the delimiter listing starts after a first page of files only (it would show the same files);
- the one span over the whole remote hands that page out as its first page (no request), in the
  sampler's process and, sent along with the prepared listing, in the listing process;
- a first page that holds a folder's keys is still looked at with the delimiter from the start;
- the delimiter's pages of files only are kept too: what they list is what the listing would
  (a flat bucket of two pages, that benchmark's, was listed again after the discovery had read it
  all: three more LISTs and 0.1 s before the first object GET); where they reach the end, the
  listing is theirs and the first page's, done, without a request.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from common import wait_until
from sampler_helpers import index_rows, running_sampler, s3_env

from epochfs.benchmarks.synthetic_s3 import Dataset, SyntheticS3
from epochfs.sidecar.config import SamplerSettings
from epochfs.sidecar.listing import Lister
from epochfs.sidecar.listing.child import _list
from epochfs.sidecar.listing.paged import PagedSource
from epochfs.sidecar.listing.planner import FIRST_PAGE
from epochfs.sidecar.listing.span import Span
from epochfs.sidecar.remote.testing import PagedMemoryRemote
from epochfs.sidecar.store import Store

FLAT = {f"k{i:03d}": b"x" for i in range(125)}
"""Thirteen pages of ten files, no folder: more than the discovery's pages reach (its first page
and DISCOVERY_PAGES delimiter pages, 110 keys)."""
SHORT = {f"k{i:03d}": b"x" for i in range(25)}
"""Three pages of ten files, no folder: the discovery's pages list them all."""


def test_a_flat_first_page_is_not_listed_again_by_the_discovery_or_the_listing() -> None:
    remote = PagedMemoryRemote(FLAT, page=10)
    source = PagedSource(remote)
    assert source.spans() == [Span("", "", None)]
    # The delimiter's look starts after the first page's last key, then follows its token.
    assert remote.pages_asked == [("", "", None), ("", "k009", None),
                                  *[("", "", f"k{i:03d}") for i in range(19, 100, 10)]]
    assert not source.fits_one_page
    first = source.read_page(Span("", "", None), "", 10)
    assert [o.key for o in first.objects] == [f"k{i:03d}" for i in range(10)]
    assert (first.after, first.done) == ("k009", False)
    assert len(remote.pages_asked) == 11  # handed out without a request
    kept = source.read_page(Span("", "", None), first.after, 10)  # a delimiter page's keys
    assert ([o.key for o in kept.objects], kept.done) == ([f"k{i:03d}" for i in range(10, 20)], False)
    assert len(remote.pages_asked) == 11
    rest = source.read_page(Span("", "", None), "k109", 10)
    assert remote.pages_asked[-1] == ("", "k109", None)
    assert [o.key for o in rest.objects][:1] == ["k110"]


def test_a_flat_remote_the_discovery_s_pages_reach_the_end_of_is_the_whole_listing() -> None:
    remote = PagedMemoryRemote(SHORT, page=10)
    source = PagedSource(remote)
    assert source.spans() == [Span("", "", None)] and source.fits_one_page
    assert remote.pages_asked == [("", "", None), ("", "k009", None), ("", "", "k019")]
    page = source.read_page(Span("", "", None), "", 4)
    assert ([o.key for o in page.objects], page.after, page.done) == (sorted(SHORT), "k024", True)
    assert len(remote.pages_asked) == 3


def test_a_flat_remote_of_two_pages_is_cataloged_by_the_discovery_s_requests_alone(
        tmp_path: Path) -> None:
    """The fetch benchmark's 1,500 objects of 64 KiB, as the sampler's lister runs it: the
    discovery's page and its delimiter page, and not a LIST more (there were five)."""
    keys = {f"k{i:04d}": b"x" for i in range(1500)}
    remote = PagedMemoryRemote(keys, page=1000)
    store = Store(tmp_path / "cache", create=True)
    try:
        report = Lister(store, PagedSource(remote), seed=0).run()
        assert report.complete and report.added == len(keys)
        assert remote.pages_asked == [("", "", None), ("", "k0999", None)]
    finally:
        store.close()


def test_the_planner_gets_no_more_of_the_kept_first_page_than_it_asks() -> None:
    """The planner's first pages are small so every part of the key space has keys early; handed
    the whole first page (the start's 1,000 keys of a flat bucket), the first decile was lopsided
    and 600k flat keys' epochs 2.2-3.3x a random sample's TV (1.4-1.8x before)."""
    remote = PagedMemoryRemote(FLAT, page=10)
    source = PagedSource(remote)
    source.spans()
    asked = len(remote.pages_asked)
    first = source.read_page(Span("", "", None), "", 4)
    assert [o.key for o in first.objects] == [f"k{i:03d}" for i in range(4)]
    assert (first.after, first.done) == ("k003", False)
    assert len(remote.pages_asked) == asked  # no request for it
    rest = source.read_page(Span("", "", None), first.after, 10)  # more of it: still none
    assert ([o.key for o in rest.objects], rest.done) == ([f"k{i:03d}" for i in range(4, 14)], False)
    assert len(remote.pages_asked) == asked
    more = source.read_page(Span("", "", None), "k109", 10)
    assert remote.pages_asked[-1] == ("", "k109", None)
    assert [o.key for o in more.objects][:1] == ["k110"]


def test_a_first_page_that_is_the_whole_remote_is_handed_out_whole() -> None:
    """A remote that fits in one page (the fetch benchmark's 160 objects of 4 MiB): the planner's
    small first page took the first keys of it and asked the rest again, a gallop past its end and
    a page of the rest (two LISTs, and the first fetch waited for them); now the whole page is
    the whole listing, done, without a request."""
    remote = PagedMemoryRemote(FLAT, page=200)
    source = PagedSource(remote)
    assert source.spans() == [Span("", "", None)] and source.fits_one_page
    asked = len(remote.pages_asked)
    page = source.read_page(Span("", "", None), "", 4)
    assert [o.key for o in page.objects] == sorted(FLAT)
    assert (page.after, page.done) == ("k124", True)
    assert len(remote.pages_asked) == asked == 1


def test_a_remote_of_one_page_is_cataloged_by_the_discovery_s_request_alone(tmp_path: Path) -> None:
    """The lister over it, as the sampler runs it: every key cataloged, one LIST in all (more keys
    than the planner's first page asks, :data:`~.planner.FIRST_PAGE`)."""
    keys = {f"k{i:04d}": b"x" for i in range(3 * FIRST_PAGE)}
    remote = PagedMemoryRemote(keys, page=1000)
    store = Store(tmp_path / "cache", create=True)
    try:
        lister = Lister(store, PagedSource(remote), seed=0)
        report = lister.run()
        assert report.complete and report.added == len(keys)
        assert remote.pages_asked == [("", "", None)]
    finally:
        store.close()


def test_the_streamed_pages_go_on_after_the_kept_first_page() -> None:
    remote = PagedMemoryRemote(FLAT, page=10)
    source = PagedSource(remote)
    source.spans()
    asked = len(remote.pages_asked)
    keys = [o.key for page in source.pages(Span("", "", None), "") for o in page.objects]
    assert keys == sorted(FLAT)
    assert remote.pages_asked[asked] == ("", "k109", None)


def test_a_first_page_with_a_folder_is_looked_at_from_the_start() -> None:
    objects = {**{f"a/{i:02d}": b"x" for i in range(12)}, **{f"b{i:02d}": b"x" for i in range(12)}}
    remote = PagedMemoryRemote(objects, page=10)
    PagedSource(remote).spans()
    assert remote.pages_asked[:2] == [("", "", None), ("", "", None)]


def test_the_listing_process_lists_on_after_the_first_page_it_is_given(tmp_path: Path) -> None:
    """The child's side (:func:`_list`, run here on a thread with a real index): given the first
    page, its first commit is that page, and its first request starts after it. Every request
    after a span's first waits at the gate, so what is committed before it opens is the page."""
    cache = tmp_path / "cache"
    settings = SamplerSettings(remote="memory://paged", cache=cache, list_process=True)
    parent_remote = PagedMemoryRemote(FLAT, page=10)
    child_remote = PagedMemoryRemote(FLAT, page=10)
    child_remote.gate = threading.Event()
    parent_end, child_end = socket.socketpair()
    from multiprocessing.connection import Connection

    parent_conn, child_conn = Connection(parent_end.detach()), Connection(child_end.detach())
    with Store(cache, create=True) as store, Store(cache) as child_store:
        source = PagedSource(parent_remote)
        prepared = Lister(store, source, seed=0).prepare()
        first = source.first_page
        assert first is not None and len(first[0]) == 110 and first[1] is False
        done: list[int] = []
        child = threading.Thread(target=lambda: done.append(_list(
            child_conn, settings, child_store, child_remote, prepared, None, None, first)))
        child.start()
        try:
            wait_until(lambda: len(index_rows(cache, "SELECT key FROM catalog")) >= 10,
                       what="the given page committed")
            assert ("", "", None) not in child_remote.pages_asked
            committed = {str(r[0]) for r in index_rows(cache, "SELECT key FROM catalog")}
            assert committed <= set(sorted(FLAT)[:110])
        finally:
            child_remote.gate.set()
            parent_conn.send(("stop",))
            child.join(timeout=30)
            parent_conn.close()
        assert not child.is_alive() and done == [0]
    assert all(start == "" or start >= "k109" for _, start, _ in child_remote.pages_asked)


def test_a_real_listing_process_is_given_the_first_page(tmp_path: Path) -> None:
    """The whole way: ``epochfs sample`` against an S3 endpoint of 12,500 flat keys (more than
    the discovery's pages reach); the child says it was given the page (not a pickling or import
    error, which would end it and start another: the listing would still end, from the index), and
    every key is cataloged."""
    with SyntheticS3(Dataset(12500, 64), list_latency=0) as server:
        cache = tmp_path / "cache"
        with running_sampler(cache, server.url, "--endpoint-url", server.endpoint, "--capacity", "1Mi",
                             "--log-level", "INFO", env=s3_env(server.endpoint)) as sp:
            wait_until(lambda: len(index_rows(cache, "SELECT key FROM catalog")) == 12500,
                       what="every key cataloged")
        log = sp.log_text()
        assert "given the first page the sampler read (11000 keys)" in log, log[-3000:]
        assert "the listing process failed" not in log and "exited with" not in log, log[-3000:]


def test_on_threads_the_listing_goes_on_after_the_first_page(tmp_path: Path) -> None:
    """``--list-process 0``: the sampler's own listing starts from the kept page and lists every
    other key after it (none lost between the page and the next request, none twice)."""
    with SyntheticS3(Dataset(12500, 64), list_latency=0) as server:
        cache = tmp_path / "cache"
        with running_sampler(cache, server.url, "--endpoint-url", server.endpoint, "--capacity", "1Mi",
                             "--list-process", "0", env=s3_env(server.endpoint)):
            wait_until(lambda: index_rows(cache, "SELECT value FROM meta WHERE name='listing_complete'"),
                       what="the listing complete")
        keys = [str(r[0]) for r in index_rows(cache, "SELECT key FROM catalog")]
        assert sorted(keys) == [Dataset(12500, 64).key(i) for i in range(12500)]
