"""A file beside a folder of its name is skipped however the listing cuts the key space.

A key ``one/k`` beside ``one/k/x`` cannot be shown as both a file and a folder: a listing sorted
by key skips the file. The listers read stretches of the key space in key order: each span, and
each range the planner splits off a large folder while listing it. With 1,000 keys ``one/k-NNNN``
between ``one/k`` and ``one/k/x`` the planner splits the folder between them, and a listing
stopped and resumed cuts it at its resume points: checked each on its own, the two sides would
miss the clash, and ``one/k`` would be cataloged and fetched, then hidden by the view (the epoch's
size one more than a reader sees). And only a folder a kept key is in makes a clash: a folder
marker (``m`` beside ``m/``) or keys refused as unsafe (``w`` beside ``w/../v``) make no folder
in the view, whether ``m/`` and ``w/`` start spans of a big bucket or not (a small one).

A real :class:`~epochfs.sidecar.listing.Lister` (four listers and the planner) lists a real S3
server (moto) into a real :class:`~epochfs.sidecar.store.Store`, whole and stopped then resumed
at several points; a small bucket of the same odd keys is the reference. The end to end case
(``epochfs sample``, the epoch against what a reader is shown, relists) is
tests/sampler/test_clash_split_epoch.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from common import S3Server

from epochfs.sidecar.listing.filter import CatalogReport
from epochfs.sidecar.listing.lister import Lister
from epochfs.sidecar.listing.sources import source_for
from epochfs.sidecar.remote import open_remote
from epochfs.sidecar.store import Store
from epochfs.sidecar.store.catalog import SKIPPED_CLASH

ODD = {"m": b"file m", "m/": b"", "w": b"file w", "w/../v": b"refused", "good/x": b"good"}
"""A file beside a folder marker, a file beside a refused key, and a plain key: two kept files."""
CLASHES = {"one/k": b"file k", "one/k/x": b"below k", "one/zz": b"file zz", "one/zz/y": b"below zz"}
BIG = {**ODD, **CLASHES, **{f"one/k-{i:04d}": b"%d" % i for i in range(1000)},
       **{f"two/{i}": b"t%d" % i for i in range(50)}}
"""1,000 keys between ``one/k`` and ``one/k/x``: the bucket (1,059 keys) does not fit in one page,
so the folder is a span whose first page (100 keys) ends well before ``one/k/x`` and the planner
splits it between them (the test asserts the split; 600 keys fit in one page and do not split)."""
SKIPS = {"one/k", "one/zz", "w/../v"}
"""What a listing of BIG skips: two files that are folders too, one unsafe key."""


def _put(s3: S3Server, bucket: str, objects: dict[str, bytes]) -> None:
    client = s3.client()
    client.create_bucket(Bucket=bucket)
    with ThreadPoolExecutor(8) as pool:  # the client's pool holds 10 connections
        list(pool.map(lambda kv: client.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), objects.items()))


@pytest.fixture
def big(s3: S3Server) -> Iterator[str]:
    _put(s3, "big", BIG)
    yield "s3://big"


def _lister(store: Store, url: str, s3: S3Server, *, stop_after: int | None = None,
            starts: set[str] | None = None) -> Lister:
    """Four listers over ``url``, stopped once ``stop_after`` pages are committed (None: to the
    end); ``starts`` collects the start of every part the listing committed (its splits)."""
    stop = threading.Event()

    def on_page(report: CatalogReport) -> None:
        if starts is not None:
            starts.update(p.start for p in store.listings().state().parts)
        if stop_after is not None and report.pages >= stop_after:
            stop.set()

    remote = open_remote(url, endpoint_url=s3.endpoint, read_timeout=10)
    return Lister(store, source_for(remote), seed=7, threads=4, stop=stop, on_page=on_page)


def _rows(store: Store) -> dict[str, int]:
    return {str(k): int(s) for k, s in store._ix.query("SELECT key, skipped FROM catalog")}


def _clash_lines(caplog: pytest.LogCaptureFixture, key: str) -> int:
    return sum(r.getMessage() == f"skipping key {key!r}: it is also a folder of other keys"
               for r in caplog.records)


def _check(store: Store, caplog: pytest.LogCaptureFixture, objects: dict[str, bytes]) -> None:
    rows = _rows(store)
    clashes = {k for k, s in rows.items() if s == SKIPPED_CLASH}
    assert clashes == {k for k in ("one/k", "one/zz") if k in objects}, clashes
    assert rows["m"] == 0 and rows["w"] == 0, "a marker or refused keys make no folder"
    kept = {k for k in objects if not k.endswith("/") and k != "w/../v"}
    assert set(rows) == kept, sorted(set(rows) ^ kept)[:5]
    for key in clashes:
        assert _clash_lines(caplog, key) == 1, f"{key} logged once"
    assert store.stats().skipped_total == len(clashes) + 1, "the clashes and the unsafe key, once each"


def test_a_clash_split_across_ranges_or_a_resume_is_skipped(
        big: str, s3: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Listed whole by four listers, then (a fresh cache each) stopped after a few pages and
    resumed by a new lister, as a sampler started again: the pages committed before the stop are
    the other side of some clashes (the catalog's rows). One bucket for all: its 1,059 uploads
    cost more than the listings."""
    caplog.set_level(logging.WARNING, logger="epochfs.catalog")
    starts: set[str] = set()
    with Store(tmp_path / "whole", create=True) as store:
        report = _lister(store, big, s3, starts=starts).run()
        assert report.complete
        assert any("one/k" < s < "one/k/x" for s in starts), f"no split between them: {sorted(starts)}"
        assert {"m/", "w/"} <= starts, "the odd folders start spans: the multi-span case"
        _check(store, caplog, BIG)
        assert (report.clashes, report.hostile, report.markers) == (2, 1, 1), str(report)
        assert report.added == len(BIG) - 1 - 1 - 2, str(report)  # the marker, the unsafe key, the clashes
    # The whole listing is about 12 pages; up to four more than stop_after are in flight when the
    # stop is set (one a lister), so the last stop is at 6, not 10 (then it sometimes completed).
    for stop_after in (1, 3, 6):
        caplog.clear()
        with Store(tmp_path / f"resumed-{stop_after}", create=True) as store:
            assert not _lister(store, big, s3, stop_after=stop_after).run().complete
            assert _lister(store, big, s3).run().complete
            _check(store, caplog, BIG)


def test_a_small_bucket_keeps_and_skips_the_same_keys(
        s3: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The reference: one span, one stretch; ``m`` and ``w`` kept, as in the big bucket."""
    caplog.set_level(logging.WARNING, logger="epochfs.catalog")
    small = {**ODD, **CLASHES}
    _put(s3, "small", small)
    with Store(tmp_path / "cache", create=True) as store:
        report = _lister(store, "s3://small", s3).run()
        assert report.complete and report.markers == 1, str(report)
        _check(store, caplog, small)
