"""``benchmarks/scale.py``'s restart has something to fetch, or the benchmark says at once that it
has not. Its first start's cache held the whole remote at 10k keys (234 MiB for 156 MiB) and at the
docstring's smoke size, so the restart fetched nothing and the benchmark waited its whole
``--timeout`` (3,600 s by default) for "a sample after the restart" (tests/sidecar/
test_bench_scale_smoke.py runs the smoke command itself)."""

from __future__ import annotations

from pathlib import Path

from store_helpers import put

from epochfs.benchmarks import scale
from epochfs.benchmarks._scale_fetch import nothing_to_fetch
from epochfs.sidecar.store import INDEX_NAME, Policy, Store


def test_the_cache_never_holds_the_whole_remote_and_holds_the_samples_waited_for() -> None:
    for keys, samples in ((2000, 200), (5000, 200), (10_000, 5000), (100_000, 5000), (1_000_000, 5000)):
        capacity = scale.cache_capacity(keys, samples, 16384)
        assert 1.5 * samples * 16384 <= capacity < keys * 16384, (keys, capacity)
    assert scale.cache_capacity(100_000, 5000, 16384) == 3 * 5000 * 16384  # unchanged where it fit


def test_a_restart_with_nothing_to_fetch_is_named_before_it_is_waited_for(tmp_path: Path) -> None:
    with Store(tmp_path / "cache", create=True) as store:
        store.configure(Policy(capacity=1000, keep_epochs=2, headroom=0.0))
        for i in range(10):
            put(store, f"k{i:02d}", size=100)
        assert store.cut() is not None  # every sample in the live epoch: none may be evicted
    index = tmp_path / "cache" / INDEX_NAME
    everything = nothing_to_fetch(index, keys=10, capacity=2000, size=100)
    assert everything is not None and everything.startswith("all 10 keys of the remote are cached")
    full = nothing_to_fetch(index, keys=50, capacity=1000, size=100)
    assert full is not None and full.startswith("the cache is full"), full
    assert nothing_to_fetch(index, keys=50, capacity=1100, size=100) is None  # room for one more
