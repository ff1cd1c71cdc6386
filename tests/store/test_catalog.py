"""The catalog: streamed listing in batches (bounded memory), shards, limits, name clashes."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_helpers import catalog_count, sampling_order

from epochfs.sidecar import keyorder
from epochfs.sidecar.catalog import build_catalog
from epochfs.sidecar.remote import Remote, RemoteObject
from epochfs.sidecar.store import Store


class ListingOnly(Remote):
    """A remote whose listing is generated, so a test can list far more keys than it stores."""

    url = "generated://"

    def __init__(self, keys: Iterator[tuple[str | bytes, int]], *, sorted_listing: bool = True) -> None:
        self._keys = keys
        self.sorted_listing = sorted_listing

    def list(self) -> Iterator[RemoteObject]:
        for key, size in self._keys:
            yield RemoteObject(key, size, "v1")

    def open(self, key: str, *, checksum: bool = False):
        raise AssertionError("the catalog never opens objects")

    def close(self) -> None:
        pass


def generated(n: int) -> Iterator[tuple[str, int]]:
    return ((f"train/{i // 1000:04d}/{i:08d}.npz", 1000 + i % 7) for i in range(n))


def catalog_keys(store: Store) -> list[str]:
    return [c.key for _, c in store.candidates(after_rank=None, limit=10**9)]


def listing_peak_bytes(tmp_path: Path, n: int) -> int:
    store = Store(tmp_path / "c", create=True)
    tracemalloc.start()
    try:
        report = build_catalog(store, ListingOnly(generated(n)), seed=1, shard_index=0, shard_count=1,
                               object_limit=10**9)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.listed == report.added == catalog_count(store) == n
    return peak


def test_listing_memory_is_bounded_by_the_batch(tmp_path: Path) -> None:
    """A listing's peak memory is its batch's, not its length's. A batch of 1,000 peaks at about
    0.5 MiB (tracemalloc's count); 20,000 keys held as they are listed would take about 4 MiB. The
    bound, 2 MiB, is four times the first and half the second: about 105 bytes a key, the share a
    listing may keep of each key at any count. Every traced allocation is slow, so the keys are
    no more than the bound needs to stand well above the batch's peak."""
    peak = listing_peak_bytes(tmp_path, 20_000)
    assert peak < 2 * 2**20, f"peak {peak / 2**20:.1f} MiB while listing"


@pytest.mark.slow
def test_a_million_keys(tmp_path: Path) -> None:
    peak = listing_peak_bytes(tmp_path, 1_000_000)
    assert peak < 5 * 2**20, f"peak {peak / 2**20:.1f} MiB while listing"


def test_catalog_is_in_sampling_order_and_only_this_shard(tmp_path: Path) -> None:
    keys = [f"k/{i}" for i in range(300)]
    store = Store(tmp_path / "c", create=True)
    report = build_catalog(store, ListingOnly(iter([(k, 10) for k in keys])), seed=5, shard_index=1,
                           shard_count=3, object_limit=100)
    mine = [k for k in keys if keyorder.shard_of(k, 3) == 1]
    assert report.in_shard == len(mine)
    assert catalog_keys(store) == sampling_order(5, mine)


def test_limits_and_hostile_keys_are_counted_once_across_restarts(tmp_path: Path) -> None:
    listing = [("ok/a", 10), ("ok/b", 500), ("../x", 1), (b"bad\xff", 1), ("d/", 0)]
    store = Store(tmp_path / "c", create=True)
    for _ in range(2):
        report = build_catalog(store, ListingOnly(iter(listing)), seed=0, shard_index=0, shard_count=1,
                               object_limit=100)
        assert (report.added, report.too_large, report.hostile, report.markers) == (1, 1, 2, 1)
        assert store.stats().skipped_total == 3, "a restart lists again without counting again"
    assert catalog_keys(store) == ["ok/a"]


def test_file_and_folder_clashes_skip_the_file(tmp_path: Path) -> None:
    listing = sorted(["a", "a!", "a/b", "a/b/c", "a/b0", "ab", "z/y", "z/y.txt"])
    store = Store(tmp_path / "c", create=True)
    report = build_catalog(store, ListingOnly(iter([(k, 1) for k in listing])), seed=0,
                           shard_index=0, shard_count=1, object_limit=100, batch=2)
    assert report.clashes == 2
    assert sorted(catalog_keys(store)) == ["a!", "a/b/c", "a/b0", "ab", "z/y", "z/y.txt"]
    assert store.stats().skipped_total == 2


def test_unsorted_listings_are_not_checked_for_clashes(tmp_path: Path) -> None:
    store = Store(tmp_path / "c", create=True)
    report = build_catalog(store, ListingOnly(iter([("b", 1), ("a", 1), ("a/c", 1)])), seed=0,
                           shard_index=0, shard_count=1, object_limit=100)
    assert report.clashes == 0 and report.added == 3
