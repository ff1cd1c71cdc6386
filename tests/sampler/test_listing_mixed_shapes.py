"""Names of several shapes in one folder (``s000123.bin``, ``new0042.bin``, ``zz006.bin``) and a
folder listed with the files beside it must not blow the listing's estimate of the dataset up by
orders of magnitude: the fetch order's pace divides by it, so while it is blown up nothing is
fetched (docs/listing.md, "Estimates"; docs/sampler.md: epoch 0 within seconds of the start).

Reported: 40 folders of 150 sparse ``sNNNNNN.bin`` names and 10 ``newNNNN.bin`` each, one
``zzNNN.bin`` in 20 of them, 50 files beside the folders (6,470 keys) were estimated at 420M
keys, the listing read 433 pages (153 without the ``zz`` names) and the first sample was fetched
after ~32 s. A key shape learnt one alphabet a position widened at the ``zz`` name (``.`` beside
digits), and the densities measured in the narrower shape were kept: keys per number of a shape
whose numbers had become many times as many.

In-process: the real :class:`~epochfs.sidecar.listing.Lister` and planner over the paged in-memory
remote (``StartAfter`` from any string, as S3), one lister so the pages come in one order; what
the sampler reads (the index's listing progress) and its pace (the fetch order's formula) at each
committed page. Pages are counted, not seconds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from epochfs.sidecar.listing import Lister, source_for
from epochfs.sidecar.listing.learning import learn_page
from epochfs.sidecar.listing.segments import Segment, SpanState, keys_left
from epochfs.sidecar.remote.testing import PagedMemoryRemote
from epochfs.sidecar.sampler.pace import LEAD, PACE_START, spread_factor, walk_cap
from epochfs.sidecar.store import Store
from epochfs.sidecar.store.listings import Part

SEED = 5


def mixed_key_space(*, zz: bool = True) -> list[str]:
    """The reported key space (the reviewer's ``mkbz.py``): 6,470 keys, 6,450 without ``zz``."""
    keys = [f"ds/f{i % 40:02d}/s{(i * 7919) % 100000:06d}.bin" for i in range(6000)]
    keys += [f"ds/top{i}.bin" for i in range(50)]
    keys += [f"ds/f{i % 40:02d}/new{i:04d}.bin" for i in range(400)]
    if zz:
        keys += [f"ds/f{i:02d}/zz{i:03d}.bin" for i in range(20)]
    return sorted(set(keys))


def _pace_lets_through(known: dict[str, Any], lowest_rank: int | None) -> bool:
    """Whether the fetch order's pace (``FetchOrder._pace``, nothing taken yet) and its cap let
    the lowest-ranked listed key be fetched: the first round read, the pace's rank above it."""
    estimated = known.get("estimated_objects")
    if lowest_rank is None or not estimated or known.get("first_round") is False:
        return False
    cap = walk_cap(known)
    if cap is not None and cap < 1:
        return False
    share = LEAD * spread_factor(float(known.get("skew") or 0.0)) * PACE_START / max(1, int(estimated))
    return share >= 1.0 or lowest_rank < int(share * 2**64) - 2**63


def _listing(keys: list[str], tmp: Path) -> tuple[list[tuple[int, dict[str, Any], bool]], int]:
    """List ``keys``: at each committed page, (LIST requests so far, what the sampler reads of the
    listing, whether the pace lets a listed key be fetched); and the LIST requests in all."""
    remote = PagedMemoryRemote(dict.fromkeys(keys, b"x"), page=1000)
    store = Store(tmp / "c", create=True)
    seen: list[tuple[int, dict[str, Any], bool]] = []

    def on_page(report: object) -> None:
        known = store.listing_known()
        (lowest,) = store._ix.query("SELECT min(rank) FROM catalog")[0]
        seen.append((remote.list_calls, known, _pace_lets_through(known, lowest)))

    try:
        report = Lister(store, source_for(remote), seed=SEED, threads=1, on_page=on_page).run()
        assert report.complete and report.listed == len(keys)
    finally:
        store.close()
    return seen, remote.list_calls


def test_mixed_name_shapes_keep_the_estimate_near_the_dataset_and_the_first_fetch_early(
        tmp_path: Path) -> None:
    keys = mixed_key_space()
    seen, lists = _listing(keys, tmp_path)
    after_round = [(n, int(k["estimated_objects"])) for n, k, _ in seen
                   if k.get("first_round") and k.get("estimated_objects")]
    assert after_round, "the first round never ended"
    at, worst = max(after_round, key=lambda p: p[1])
    first = next((n for n, _, ok in seen if ok), None)
    # Before: 436 LIST requests, 763M keys estimated at LIST 85 as the first round was read, the
    # first key let through at LIST 274. Now: 125, at most 9,472 keys (1.5x), at LIST 85.
    said = (f"{lists} LIST requests for {len(keys)} keys; after the first round estimated up to "
            f"{worst} at LIST {at}; the pace let the first key through at LIST {first}")
    assert lists < 200 and worst <= 10 * len(keys) and first is not None and first <= 100, said


def test_a_wider_shape_measures_the_densities_again() -> None:
    """A density is keys per number of the shape it was measured in: once a page widens the shape,
    the segments' densities are measured again in the new one, and the estimate of a stretch is
    about the same in either (a ``zz`` name beside ``sNNNNNN`` ones: 18 keys, 663k with the old
    density; 15M keys of a 161-key folder in the report)."""
    span = SpanState(0, "ds/f06/")
    first = Segment(Part(0, "ds/f06/", "", "ds/f06/s700000.bin"), 0)
    tail = Segment(Part(1, "ds/f06/", "ds/f06/s700000.bin", None), 0)
    span.segments += [first, tail]
    page = [f"ds/f06/s{i:06d}.bin" for i in range(0, 600000, 6000)]
    learn_page(span, first, page)
    first.part.after = page[-1]
    before = keys_left(span, first)
    assert before is not None and 5 <= before <= 40, before
    narrow = span.shape
    assert narrow is not None
    learn_page(span, tail, ["ds/f06/zz006.bin"])
    assert span.shape is not None and span.shape.size > 1000 * narrow.size
    after = keys_left(span, first)
    assert after is not None and after <= 3 * before, (before, after)



def test_unpadded_numbers_in_one_folder_are_no_far_off_cluster(tmp_path: Path) -> None:
    """``0.jpg`` ... ``19999.jpg`` lie unevenly along the shape's numbers (``1999.jpg``, ``2.jpg``,
    ``20.jpg`` in byte order): a gallop's page past such a gap is the folder's own names, not a
    cluster past names nobody uses. Taken for one, the listing took 185 LISTs and let the first
    key through at the 80th (89 and the 16th without that rule)."""
    keys = sorted(f"ds/{i}.jpg" for i in range(20_000))
    seen, lists = _listing(keys, tmp_path)
    first = next((n for n, _, ok in seen if ok), None)
    assert lists <= 120 and first is not None and first <= 30, (lists, first)
