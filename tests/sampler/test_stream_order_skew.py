"""Streams read from their first record (issue 19: "``--index`` and S3 Inventory sources too: an
index streamed in key order has the same problem"): what is read of a data file in key order is its
first keys, so the planner counts it as off by all of it until the file is read to its end, and the
fetch order's cap (:func:`~epochfs.sidecar.sampler.pace.skew_cap`) holds the fetches to a few
samples meanwhile. An ``epochfs index`` written shuffled is a uniform sample at every prefix: no cap.
"""

from __future__ import annotations

import json
import random
import threading
from pathlib import Path
from unittest import mock

import pytest

from epochfs.sidecar.listing import Lister
from epochfs.sidecar.listing.indexfile import IndexSource, object_record
from epochfs.sidecar.listing.planner import Planner
from epochfs.sidecar.remote import RemoteObject
from epochfs.sidecar.sampler.pace import skew_cap
from epochfs.sidecar.store import Store
from epochfs.sidecar.store.listings import Part


def _read(planner: Planner, files: int, rows: int, *, done: set[int]) -> None:
    """One page of ``rows`` records from each data file, the files in ``done`` read to their end."""
    taken = {}
    while (seg := planner.take()) is not None:
        taken[seg.part.part] = seg
    for part, seg in sorted(taken.items()):
        keys = [f"f{part}/{i:06d}" for i in range(rows)]
        seg.part.after, seg.part.done = str(rows), part in done
        planner.record(seg, keys)


def _files(n: int, *, in_key_order: bool) -> Planner:
    parts = [Part(i, f"s3://inv/data/{i}.csv.gz", "", None) for i in range(n)]
    return Planner(parts, splittable=False, streams_in_key_order=in_key_order)


@mock.patch("epochfs.sidecar.listing.planner.SKEW_EVERY", 0.0)
def test_data_files_read_in_key_order_are_skewed_until_read_to_their_end() -> None:
    planner = _files(4, in_key_order=True)
    _read(planner, 4, 500, done=set())
    assert planner.progress()["skew"] == 1.0, "every file half read: its first keys only"
    assert (skew_cap(1.0) or 0) <= 4, "a few samples while nothing is read whole"
    _read(planner, 4, 500, done={0, 1})
    assert planner.progress()["skew"] == 1.0, "two read whole are no typical size: any share"
    _read(planner, 4, 500, done={2, 3})
    assert planner.progress()["skew"] == 0.0, "read whole: the listed keys are the dataset"


@mock.patch("epochfs.sidecar.listing.planner.SKEW_EVERY", 0.0)
def test_a_shuffled_stream_is_not_skewed_while_read() -> None:
    planner = _files(1, in_key_order=False)
    _read(planner, 1, 500, done=set())
    assert planner.progress()["skew"] < 0.5, "a shuffled index: every prefix a uniform sample"
    cap = skew_cap(planner.progress()["skew"])
    assert cap is None or cap > 10


def test_splittable_sources_are_never_streams() -> None:
    planner = Planner([Part(0, "", "", None)], splittable=True, streams_in_key_order=True)
    assert not planner.streams_in_key_order, "pages that start anywhere: the gallop finds the end"


def _index(tmp_path: Path, header: dict[str, object], keys: list[str]) -> str:
    path = tmp_path / "index.jsonl"
    path.write_bytes(json.dumps({"epochfs_index": 1, **header}).encode() + b"\n"
                     + b"".join(object_record(RemoteObject(k, 1, "v")) for k in keys)
                     + json.dumps({"end": True, "count": len(keys)}).encode() + b"\n")
    return path.as_uri()


@pytest.mark.parametrize(("header", "lopsided"), [({"sorted": True, "order": "sorted"}, True),
                                                  ({"sorted": False}, True),
                                                  ({"sorted": False, "order": "shuffled"}, False)])
@mock.patch("epochfs.sidecar.listing.planner.SKEW_EVERY", 0.0)
def test_an_index_read_by_the_lister_is_lopsided_until_read_whole_unless_written_shuffled(
        tmp_path: Path, header: dict[str, object], lopsided: bool) -> None:
    """Through the real lister: an index written in key order (or with no promise of an order: one
    written by hand, an older epochfs) is counted as off by all of what is read until its end, so
    the fetches wait for it; ``epochfs index``'s shuffled one is not."""
    keys = [f"{c}/{i:04d}.bin" for c in "abcd" for i in range(500)]
    if header.get("order") == "shuffled":
        random.Random(0).shuffle(keys)
    source = IndexSource(_index(tmp_path, header, keys), page=100)
    store = Store(tmp_path / "cache", create=True)
    seen: list[float] = []
    lister: Lister | None = None

    def on_page(_report: object) -> None:
        assert lister is not None and lister.planner is not None
        seen.append(lister.planner.progress()["skew"])

    lister = Lister(store, source, seed=0, threads=1, stop=threading.Event(), on_page=on_page)
    assert lister.run().complete
    while_reading = seen[:-1]  # the last page's commit ends the stream
    assert while_reading, "pages committed before the end"
    if lopsided:
        assert min(while_reading) == 1.0, while_reading
    else:
        assert max(while_reading) < 0.5, while_reading
    assert lister.planner is not None and lister.planner.progress()["skew"] == 0.0
