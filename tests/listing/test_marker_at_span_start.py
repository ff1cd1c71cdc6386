"""A folder marker (``m/``) at the start of a listing span is counted as every other marker.

A bucket too large for one page, with files beside its folders, is listed as ranges of folders
cut at folders' starts (:meth:`~epochfs.sidecar.listing.paged.PagedSource.spans`). A range lists
the keys after its start (S3's ``StartAfter`` is exclusive) and the range before it listed the
keys before that start: the marker ``m/`` of the folder a range starts at was in neither, so the
listing's "folder marker(s) ignored" counted it in a small bucket (one span) and not in a large
one. The planner's own cuts at a folder keep the folder's start in the lower part; the
discovery's must too. A real :class:`~epochfs.sidecar.listing.Lister` over a real S3 server
(moto), listed whole and stopped then resumed.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from common import S3Server

from epochfs.sidecar.listing.filter import CatalogReport
from epochfs.sidecar.listing.lister import Lister
from epochfs.sidecar.listing.paged import PagedSource
from epochfs.sidecar.listing.sources import source_for
from epochfs.sidecar.remote import open_remote
from epochfs.sidecar.store import Store

FOLDERS = ("f/", "m/", "n/")
OBJECTS = {"a-file": b"beside the folders", **{folder: b"" for folder in FOLDERS},
           **{f"{folder}{i:04d}": b"%d" % i for folder in FOLDERS for i in range(400)}}
"""1,204 keys (more than a page): a file beside three folders, each with its marker."""


def _lister(store: Store, url: str, s3: S3Server, *, stop_after: int | None = None) -> Lister:
    stop = threading.Event()

    def on_page(report: CatalogReport) -> None:
        if stop_after is not None and report.pages >= stop_after:
            stop.set()

    remote = open_remote(url, endpoint_url=s3.endpoint, read_timeout=10)
    return Lister(store, source_for(remote), seed=7, threads=4, stop=stop, on_page=on_page)


@pytest.mark.long
def test_every_marker_is_counted_when_the_listing_splits_at_folders(s3: S3Server, tmp_path: Path) -> None:
    client = s3.client()
    client.create_bucket(Bucket="marks")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda kv: client.put_object(Bucket="marks", Key=kv[0], Body=kv[1]), OBJECTS.items()))
    source = source_for(open_remote("s3://marks", endpoint_url=s3.endpoint, read_timeout=10))
    assert isinstance(source, PagedSource)
    spans = source.spans()
    assert any(span.start in FOLDERS for span in spans), f"no span starts at a folder: {spans}"
    with Store(tmp_path / "whole", create=True) as store:
        report = _lister(store, "s3://marks", s3).run()
        assert report.complete
        assert report.markers == len(FOLDERS), str(report)
        assert report.added == len(OBJECTS) - len(FOLDERS), str(report)
    for stop_after in (1, 3):
        with Store(tmp_path / f"resumed-{stop_after}", create=True) as store:
            first = _lister(store, "s3://marks", s3, stop_after=stop_after).run()
            assert not first.complete
            second = _lister(store, "s3://marks", s3).run()
            assert second.complete
            assert first.markers + second.markers == len(FOLDERS), f"{first}; {second}"
            assert store.stats().catalog_objects == len(OBJECTS) - len(FOLDERS)
