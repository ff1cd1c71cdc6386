"""The planner over thousands of small folders listed as ranges (issue 19, "the fair sample").

More folders than the discovery gives spans (``MAX_FOLDER_SPANS``) are read as ranges of a few
folders each, and a range's key shape numbers its folders' names as well as the keys inside them
(``class-4161/sample-000099.bin``). A segment's keys left, estimated from that shape, ran across
folders: a range's rest whose page listed keys 0-99 of one folder was estimated at 1.5M keys, and
until such segments were made spans of their own the planner's estimated whole was 4.5-7M keys of
600k, which the fetch order's pace divides by, and its skew 0.8-0.9. Now a range's segment is
estimated at most at its folders times the keys a folder listed whole held
(:meth:`~epochfs.sidecar.listing.ranges.FolderRanges.most_left`).

And a range's page that ends inside a folder makes the folder a span of its own, its end found
by a page of its own; that segment waits while the rest of the range, cut off at the next
folder's start, has its first page read, and the rests came before it (the next rest's page
made the next folder a span, and so on), so the folders' ends were found last: half the listed
keys lay in folders of unknown size all listing long, and the skew stayed at 0.8-0.9. Now such a
folder's next page comes first once its range's rest is committed (``Planner._freed``).

Pure: the real :class:`~epochfs.sidecar.listing.planner.Planner` over an in-memory listing (the
harness of ``tests/range_folders_helpers.py``)."""

from __future__ import annotations

import random
from unittest import mock

import pytest
from range_folders_helpers import folder_ranges, read_batch, zipf_key_space

from epochfs.sidecar.listing.planner import Planner
from epochfs.sidecar.listing.ranges import FolderRanges
from epochfs.sidecar.listing.segments import Segment, SpanState
from epochfs.sidecar.store.listings import Part


@pytest.mark.long
@mock.patch("epochfs.sidecar.listing.planner.SKEW_EVERY", 0.0)
def test_a_ranges_estimate_does_not_run_across_its_folders() -> None:
    """2,100 folders of 120 keys as ranges of three (more than twice ``MAX_FOLDER_SPANS``): while
    the first 40% of the keys are listed, the estimated whole stays within 2x of the keys there
    are (1.0-1.6x here; up to 13x before, every time a range's page ended inside a folder not yet
    made a span: past 2x from 28% of the keys listed)."""
    keys, paths, _ = zipf_key_space(folders=2100, keys=252_000, skew=0.0, seed=3)
    assert len(folder_ranges(paths)) < len(paths), "the folders are listed as ranges"
    planner = Planner(folder_ranges(paths), splittable=True, rng=random.Random(1), folders=paths)
    order = random.Random(2)
    listed = 0
    worst = 0.0
    while planner.open_segments and listed < len(keys) * 2 // 5:
        listed += sum(len(page) for page in read_batch(planner, keys, order))
        # Asked after the batch's commits, as the listers ask at each commit.
        worst = max(worst, int(planner.progress()["estimated"]) / len(keys))
    assert worst <= 2.0, f"the estimated whole reached {worst:.1f}x the keys there are"


@mock.patch("epochfs.sidecar.listing.planner.SKEW_EVERY", 0.0)
def test_the_folders_a_range_reads_into_have_their_ends_found_early() -> None:
    """2,500 folders of 120 keys (a range's first page of 100 keys ends inside its first
    folder): by half the keys listed the skew is 0.5 or less (0.39 here; 0.80 before, 0.61 with
    the ranges' estimates bounded but the folders' ends found last)."""
    keys, paths, _ = zipf_key_space(folders=2500, keys=300_000, skew=0.0, seed=3)
    planner = Planner(folder_ranges(paths), splittable=True, rng=random.Random(1), folders=paths)
    order = random.Random(2)
    listed = 0
    while planner.open_segments and listed < len(keys) // 2:
        listed += sum(len(page) for page in read_batch(planner, keys, order))
    skew = float(planner.progress()["skew"])
    assert skew <= 0.5, f"{listed} of {len(keys)} keys listed, the skew at {skew}"


def test_a_ranges_segment_holds_its_folders_times_a_folders_keys_at_most() -> None:
    """What :meth:`.FolderRanges.measure` learns from pages: the folders a page listed whole (from
    a folder's start to the next one's), or the keys a page listed of the folder it ended in
    (a folder holds at least those); a segment's estimate is then bounded by its folders."""
    paths = [f"class-{i:04d}/" for i in range(8)]
    ranges = FolderRanges(paths)
    seg = Segment(Part(0, "", paths[0], paths[4]), 0)
    span = SpanState(0, "")
    span.folders = (0, 4)
    assert ranges.most_left(seg) is None, "nothing measured yet"
    page = [f"{paths[0]}k{i:03d}" for i in range(100)]  # a page ending inside its first folder
    ranges.measure(seg, "", page)
    seg.part.after = page[-1]
    # Still in folder 0, with the starts of folders 1-3 ahead: four folders of at least 100 keys.
    assert ranges.most_left(seg) == 400
    whole = [*(f"{paths[4]}k{i:03d}" for i in range(30)), *(f"{paths[5]}k{i:03d}" for i in range(20))]
    other = Segment(Part(1, "", paths[4], paths[7]), 0)
    ranges.measure(other, "", [*whole, f"{paths[6]}k000"])  # folders 4 and 5 whole: 25 on average
    assert ranges.most_left(seg) == 400, "the most a page listed of one folder still bounds it"
    assert ranges.keys_left(span, seg) is None, "no shape learnt: nothing estimated"
