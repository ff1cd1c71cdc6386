"""``epochfs index`` lists on the sampler's listers and planner, into an index-file sink (issue 24:
one copy of parallel listing). Its own pool listed each span on one thread, so a flat bucket (one
span) was indexed one page at a time whatever ``--list-threads`` said; the planner splits the span
as it learns it and every lister reads. The index holds every key once in either order, the
sorted one in key order across the parts the planner split off, and a throttled page pauses the
listing, which resumes each part where its file ends.

The remote is the paged in-memory one (sidecar/remote/testing.py, ten keys a page), wrapped to count
the listing pages read at once."""

from __future__ import annotations

import gzip
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from epochfs.sidecar.listing import indexfile
from epochfs.sidecar.listing.indexfile import write_index
from epochfs.sidecar.remote import Throttled
from epochfs.sidecar.remote.base import ListedPage
from epochfs.sidecar.remote.testing import PagedMemoryRemote

LONE_WAIT = 0.5
"""Seconds a listing page read alone waits for a second one to start, so that two listers reading
at once are seen however the threads are scheduled (a wait for an event, with a bound)."""
LONE_WAITS = 8
"""Lone pages that wait at most: those read before the planner has split the span (the probe, the
span's first page, its first gallops: four, measured) and a few more; a listing on one thread
waits this many, 4 s."""


class CountingRemote(PagedMemoryRemote):
    """Counts the listing pages (not the delimiter pages that find folders) read at once, the most
    seen in ``most``; the pages numbered in ``throttle`` (from 1, in arrival order) answer SlowDown."""

    def __init__(self, objects: dict[str, bytes], *, throttle: frozenset[int] = frozenset()) -> None:
        super().__init__(objects, page=10)
        self.throttle = throttle
        self.pages = 0
        self.reading = 0
        self.most = 0
        self.lone_waits = LONE_WAITS
        self._at_once = threading.Condition()

    def list_page(self, prefix: str, *, start_after: str = "", token: str | None = None,
                  delimiter: bool = False, max_keys: int = 1000
                  ) -> ListedPage:
        if delimiter:
            return super().list_page(prefix, start_after=start_after, token=token, delimiter=True,
                                     max_keys=max_keys)
        with self._at_once:
            self.pages += 1
            if self.pages in self.throttle:
                raise Throttled("HTTP 503 SlowDown")
            self.reading += 1
            self.most = max(self.most, self.reading)
            self._at_once.notify_all()
            if self.most < 2 and self.lone_waits > 0:
                self.lone_waits -= 1
                self._at_once.wait_for(lambda: self.reading >= 2, timeout=LONE_WAIT)
        try:
            return super().list_page(prefix, start_after=start_after, token=token, max_keys=max_keys)
        finally:
            with self._at_once:
                self.reading -= 1


def flat(n: int = 3000) -> dict[str, bytes]:
    """A flat bucket: no folders, one span. 3,000 keys: the planner splits the span's middles after
    its gallops, so the parts' numbers are not their key order (at 2,000 they happened to be)."""
    return {f"img-{i:05d}.jpg": bytes([i % 251]) for i in range(n)}


def read_index(path: Path) -> tuple[dict[str, Any], list[str], dict[str, Any]]:
    lines = gzip.decompress(path.read_bytes()).splitlines()
    return json.loads(lines[0]), [json.loads(x)["k"] for x in lines[1:-1]], json.loads(lines[-1])


@pytest.mark.parametrize("order", ["shuffled", "sorted"])
def test_a_flat_bucket_is_indexed_by_several_listers_at_once(tmp_path: Path, order: str) -> None:
    objects = flat()
    remote = CountingRemote(objects)
    out = tmp_path / "i.jsonl.gz"
    assert write_index(remote, str(out), threads=4, order=order) == len(objects)
    assert remote.most >= 2, "the flat bucket's pages were read one at a time"
    header, keys, trailer = read_index(out)
    assert (header["order"], header["sorted"]) == (order, order == "sorted")
    assert trailer == {"end": True, "count": len(objects)}
    assert sorted(keys) == sorted(objects)  # every key, each once
    if order == "sorted":
        assert keys == sorted(objects, key=str.encode)  # in key order across the parts split off
    else:
        assert keys != sorted(objects)


def folders(*, files_beside: bool) -> dict[str, bytes]:
    """Five folders of 300 keys: spans a folder each; with files beside them at the top, ranges
    cut at the folder boundaries (a range's keys start at its start key, not at its prefix)."""
    objects = {f"{c}/{i:04d}.bin": b"x" for c in "abcde" for i in range(300)}
    if files_beside:
        objects.update({f"{c}.txt": b"t" for c in "abcdez"} | {"0first.bin": b"f", "b0.bin": b"g"})
    return objects


@pytest.mark.parametrize("files_beside", [False, True], ids=["a-span-a-folder", "ranges"])
def test_a_sorted_index_of_folders_is_in_key_order(tmp_path: Path, files_beside: bool) -> None:
    objects = folders(files_beside=files_beside)
    out = tmp_path / "i.jsonl.gz"
    assert write_index(CountingRemote(objects), str(out), threads=4, order="sorted") == len(objects)
    _, keys, trailer = read_index(out)
    assert trailer["count"] == len(objects)
    assert keys == sorted(objects, key=str.encode)


def test_a_throttled_page_pauses_the_listing_and_every_key_is_written_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pages throttled before and after the span is split: each is asked again, the listing goes
    on from each part's last written page, no key is lost or written twice."""
    monkeypatch.setattr(indexfile, "INDEX_RETRY", (0.01, 0.05))  # the pauses, short
    objects = flat()
    remote = CountingRemote(objects, throttle=frozenset({3, 8, 40, 41, 90}))
    out = tmp_path / "i.jsonl.gz"
    assert write_index(remote, str(out), threads=4, order="sorted") == len(objects)
    _, keys, trailer = read_index(out)
    assert trailer["count"] == len(objects)
    assert keys == sorted(objects, key=str.encode)
