"""Schedule mode goes on past the epochs whose window outgrows 64-bit integers and floats.

``initial * growth**n`` keys: with the documented ``initial=1000,growth=1.5`` epoch 91's window is past
2**63, which SQLite cannot hold, and ``growth**n`` itself leaves float's range later. Before, the window's
size was written as it came: cutting epoch 90 made the sampler measure epoch 91 ahead of its cut, which
raised OverflowError, and so did every restart (a crash loop 91 epochs into a run). A window counts at
most ``MAX_WINDOW`` keys, more than any catalog: such an epoch holds the whole catalog, as any window
larger than it does."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuse_helpers import admit, make_objects, open_store
from store_helpers import sid_of

from epochfs.sidecar.store import CatalogRow, Policy, Schedule


def test_a_window_counts_at_most_max_window_keys() -> None:
    from epochfs.sidecar.store.records import MAX_WINDOW

    schedule = Schedule(initial=1000, growth=1.5)
    sizes = [schedule.size(n) for n in range(0, 5000, 7)]
    assert sizes == sorted(sizes) and sizes[0] == 1000 and sizes[-1] == MAX_WINDOW < 2**63
    assert schedule.size(88) < MAX_WINDOW and schedule.size(91) == MAX_WINDOW
    assert Schedule(initial=1000, growth=1e308).size(2) == MAX_WINDOW  # the product overflows a float
    assert Schedule(initial=1, growth=1.0).size(10**9) == 1


@pytest.mark.parametrize("text", ["initial=1,growth=nan", "initial=1,growth=inf", "growth=0.5"])
def test_a_growth_that_is_not_a_number_of_at_least_one_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"growth must be a number of at least 1\.0"):
        Schedule.parse(text)


def test_epochs_past_the_integer_range_are_measured_ahead_and_cut(tmp_path: Path) -> None:
    objects = make_objects(30, 8)
    keys = sorted(objects)
    policy = Policy(capacity=1 << 30, keep_epochs=3, schedule=Schedule(initial=1000, growth=1.5))
    with open_store(tmp_path / "cache") as store:
        store.configure(policy)
        store.add_catalog([CatalogRow(k, sid_of(k), 8, "v", rank=i) for i, k in enumerate(keys)])
        store.finalize_catalog()
        admit(store, objects)
        for n in (0, 89, 90):
            assert store.cut(n, far=True) == n
        assert store.process_cut_requests() == []  # measures epoch 91's window ahead of its cut
        assert store.cut_ready(91)
        assert store.cut(91) == 91 and store.cut(5000, far=True) == 5000
        assert sorted(f.path for f in store.iter_epoch_files(5000)) == keys
