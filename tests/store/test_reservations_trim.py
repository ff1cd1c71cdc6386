"""``Reservations.trim`` evicts down to the capacity it is given (the configured ``--capacity``),
never to one the disk's free space bounded: a volume another tenant filled recorded a budget of a
few bytes, and a trim to it evicted every sample the sampler held (the reviewer's run: `cache 0 B /
1 B, 0 sample(s) … evicted 61`)."""

from __future__ import annotations

from pathlib import Path

from store_helpers import put

from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.store import Policy, Store


def test_trim_evicts_down_to_the_capacity_given_and_no_further(tmp_path: Path) -> None:
    with Store(tmp_path / "c", create=True) as store:
        store.configure(Policy(capacity=10_000))
        for i in range(10):
            put(store, f"k{i}", 500)
        store.configure(Policy(capacity=4_000))
        assert store.cut() == 0  # the newest 6 samples (3,000 of 4,000 bytes, headroom 25%)
        store.configure(Policy(capacity=1))  # what a disk-bounded budget records on a full volume
        reservations = Reservations(store)
        assert reservations.trim(10_000) == 0 and store.stats().samples == 10
        assert reservations.trim(2_000) == 2_000  # the 4 outside epoch 0; its 6 stay
        assert store.stats().samples == 6 and store.cache_bytes() == 3_000
