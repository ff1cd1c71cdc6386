"""The planner over thousands of folders of skewed sizes (issue 19, "many" at Zipf 1.6): more folders
than the discovery gives spans (``MAX_FOLDER_SPANS``) are listed as ranges of a few folders each, and
a range's segments are bounded by the next folder's start, which says nothing of where a folder's
keys end. Read so, a folder of 43% of 300k keys was estimated at 133 keys after a page of 100, and
waited while the small folders were listed whole: the listed keys stayed far from the folder mix
(0.6 at a quarter of the keys listed) and every epoch drew from the small folders.

Pure and in-process: the real :class:`~epochfs.sidecar.listing.planner.Planner` driven over a
synthetic listing that honours ``StartAfter`` from any string and a stop, as
:meth:`~epochfs.sidecar.listing.paged.PagedSource.read_page` does, four pages taken at a time
and recorded in a shuffled order (four listers).
"""

from __future__ import annotations

import random

from range_folders_helpers import folder_ranges, folder_tv, read_batch, zipf_key_space

from epochfs.sidecar.listing.planner import Planner

FOLDERS = 5000
KEYS = 150_000
SKEW = 1.6





def _list(keys: list[str], paths: list[str], *, until: int | None = None,
          seed: int = 0) -> tuple[Planner, list[str]]:
    """Run the planner over ``keys`` (to the end, or until ``until`` keys are listed): the planner
    and the keys listed in listing order."""
    planner = Planner(folder_ranges(paths), splittable=True, rng=random.Random(seed), folders=paths)
    order = random.Random(seed + 1)
    listed: list[str] = []
    while planner.open_segments and (until is None or len(listed) < until):
        for page in read_batch(planner, keys, order):
            listed += page
    return planner, listed



def test_a_huge_folder_in_a_range_is_listed_in_proportion_early() -> None:
    """A quarter of the keys listed: the largest folder (44% of the keys) has a fair part of its
    keys listed, the listed mix is near the folder mix, and the estimate of the whole (what status
    shows) near the truth. Before a folder of a range could become a span of its own: 97 of its
    65,914 keys listed, the listed mix 0.65 from the dataset's, the whole estimated at 57k of 150k
    (now 0.30 and 157k)."""
    keys, paths, size = zipf_key_space(folders=FOLDERS, keys=KEYS, skew=SKEW, seed=7)
    big = max(paths, key=size.__getitem__)
    assert size[big] > 0.4 * len(keys)
    planner, listed = _list(keys, paths, until=len(keys) // 4)
    in_big = sum(k.startswith(big) for k in listed)
    assert in_big > 0.1 * size[big], f"{in_big} of the largest folder's {size[big]} keys listed"
    tv = folder_tv(listed, paths, size)
    assert tv < 0.4, f"listed keys {tv:.2f} from the folder mix at {len(listed)} listed"
    estimated = int(planner.progress()["estimated"])
    assert 0.7 * len(keys) < estimated < 1.5 * len(keys), f"estimated {estimated} of {len(keys)}"


def test_every_key_is_listed_once_with_folders_made_spans() -> None:
    """Folders promoted out of their ranges, galloped and split: the listing is still exact."""
    keys, paths, _ = zipf_key_space(folders=FOLDERS, keys=KEYS, skew=SKEW, seed=3)
    planner, listed = _list(keys, paths, seed=5)
    assert planner.open_segments == 0
    assert len(listed) == len(set(listed)), "a key listed twice"
    assert sorted(listed) == keys
    progress = planner.progress()
    assert progress["spans"] > len(folder_ranges(paths)), "no folder was made a span of its own"
    assert progress["listed"] == len(keys)
