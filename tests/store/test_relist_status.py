"""A relist runs over a catalog that was complete: status, status.json and the epochs cut meanwhile
say the listing is complete (and being listed again), not the share the relist has reached.

Before: while a relist ran, `epochfs status` said `listing: 2,650 of about 10,939 keys seen (24.2%)
… epochs cut now sample what is listed so far`, and an epoch cut then recorded the relist's
estimate (20,000 listed of about 86,778), which its manifest header hands the torch client as a
quarter of the dataset covered."""

from __future__ import annotations

from pathlib import Path

from epochfs.sidecar.listing import Lister, source_for
from epochfs.sidecar.remote.testing import PagedMemoryRemote
from epochfs.sidecar.status import render
from epochfs.sidecar.store import Store
from epochfs.sidecar.store.listings import Part
from epochfs.sidecar.store.stats import known_at_cut


def test_a_relist_keeps_the_complete_listing_s_figures(tmp_path: Path) -> None:
    remote = PagedMemoryRemote({f"k/{i:03d}": b"x" for i in range(120)}, page=10)
    with Store(tmp_path / "c", create=True) as store:
        lister = Lister(store, source_for(remote), seed=0, threads=2)
        assert lister.run().complete
        assert store.stats().listing["complete"] is True
        # A relist begins (its parts written, none done) and has listed nothing yet.
        store.listings().begin([Part(0, "", "", None)], lister.listing_name)
        listing = store.stats().listing
        assert listing["complete"] is True and listing["relisting"] is True, listing
        assert listing["estimated_objects"] == 120 and listing["covered"] == 1.0
        text = render(store.stats().to_json())
        assert "listing: complete (epochs sample the whole dataset); listing it again now" in text, text
        with store._ix.read() as db:
            assert known_at_cut(db) == (120, 120)
