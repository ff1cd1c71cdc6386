"""A ``--min-samples`` above what the complete listing holds says so wherever epoch 0's wait shows.

Before: 40 objects and ``--min-samples 1000``: the trainer's wait said "epoch 0: 40/1000 samples cached"
until its timeout, and nothing said that epoch 0 could never be cut. Now ``first_epoch`` carries a
warning once the listing is complete, which ``epochfs status``, ``/readyz`` and the torch client's wait
message show."""

from __future__ import annotations

from pathlib import Path

import pytest
from fuse_helpers import open_store
from store_helpers import sid_of

from epochfs.sidecar.status import first_epoch_line
from epochfs.sidecar.store import CatalogRow


@pytest.mark.parametrize(("min_samples", "warned"), [(1000, True), (40, False)])
def test_min_samples_above_a_complete_listing_says_epoch_0_is_never_cut(tmp_path: Path, min_samples: int,
                                                                        warned: bool) -> None:
    with open_store(tmp_path / "cache", min_samples=min_samples) as store:
        keys = [f"train/{i:03d}.bin" for i in range(40)]
        store.add_catalog([CatalogRow(k, sid_of(k), 8, "v", rank=i) for i, k in enumerate(keys)])
        assert "warning" not in (store.stats().first_epoch or {})  # the listing may find more yet
        store.finalize_catalog()
        first = store.stats().first_epoch or {}
        if not warned:
            line = first_epoch_line({"first_epoch": first}) or ""
            assert "warning" not in first and "WARNING" not in line
            return
        assert first["warning"] == ("--min-samples 1000 is more than the 40 objects the complete listing "
                                    "holds for this node: epoch 0 is never cut; lower --min-samples")
        line = first_epoch_line({"first_epoch": first})
        assert line == f"epoch 0: 0/1000 samples cached (0%); WARNING: {first['warning']}"
