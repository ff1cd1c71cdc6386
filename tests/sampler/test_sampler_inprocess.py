"""The sampler's parts in-process over an in-memory remote: fetch order, outages, retries,
backpressure, admission, and what each kind of remote failure leads to. No server, no subprocess:
each test runs in about a second."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from common import wait_until
from inprocess import objects_of, sampling, settings_for
from store_helpers import put, sample_checksums, sid_of

from epochfs.sidecar import keyorder
from epochfs.sidecar.remote.errors import Changed, Denied, NotFound, Transient, Unavailable
from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.sampler.breaker import OutageBreaker
from epochfs.sidecar.sampler.order import FetchOrder
from epochfs.sidecar.store import CatalogRow, Policy, Store


def test_every_object_once_in_sampling_order(tmp_path: Path) -> None:
    objects = objects_of(40)
    remote = MemoryRemote(objects)
    settings = settings_for(tmp_path / "cache", "--concurrency", "1", "--seed", "9")
    with sampling(tmp_path / "cache", remote, settings) as (store, _):
        wait_until(lambda: store.stats().samples == 40, timeout=20, what="every object admitted")
        got = {key: path.read_bytes() for key, _, path in sample_checksums(store)}
    assert got == objects
    assert set(remote.opens.values()) == {1}, "each object opened once"
    expected = sorted(objects, key=lambda k: (keyorder.rank(9, k), k))
    assert list(remote.opens) == expected, "one download at a time follows the sampling order"


def test_a_transient_failure_is_retried_and_a_missing_object_skipped(tmp_path: Path) -> None:
    objects = objects_of(10)
    remote = MemoryRemote(objects)
    remote.fail("train/0003.bin", ConnectionResetError(104, "reset"))
    remote.fail("train/0007.bin", FileNotFoundError(2, "deleted since the listing"))
    settings = settings_for(tmp_path / "cache", "--retries", "3")
    with sampling(tmp_path / "cache", remote, settings) as (store, sampler):
        wait_until(lambda: store.stats().samples + store.stats().skipped_total == 10, timeout=20,
                   what="every object admitted or skipped")
        assert sampler.downloader.retried == 1
        assert store.stats().skipped_total == 1
    assert remote.opens["train/0003.bin"] == 2 and remote.opens["train/0007.bin"] == 1


def test_failures_not_worth_another_try_are_skipped_at_once(tmp_path: Path) -> None:
    """Not found, denied, changed since the listing, or an error no rule knows: one attempt each,
    skipped, and none of them counts toward an outage."""
    objects = objects_of(12)
    keys = sorted(objects)
    remote = MemoryRemote(objects)
    remote.fail(keys[0], NotFound(f"{keys[0]}: HTTP 404 NoSuchKey"))
    remote.fail(keys[1], Denied(f"{keys[1]}: HTTP 403 AccessDenied", status=403))
    remote.fail(keys[2], PermissionError(13, "Permission denied"))  # typed at the remote: denied
    remote.fail(keys[3], Changed(f"{keys[3]}: not the listed version"))
    remote.fail(keys[4], ValueError("a failure no rule knows"))
    breaker = OutageBreaker(after=1, pause=(30.0, 30.0))  # any outage would stall the test

    def replace_one() -> None:
        remote.objects[keys[5]] += b"longer since the listing"  # the downloader: changed

    settings = settings_for(tmp_path / "cache", "--retries", "5")
    with sampling(tmp_path / "cache", remote, settings, breaker,
                  after_listing=replace_one) as (store, sampler):
        wait_until(lambda: store.stats().samples == 6 and store.stats().skipped_total == 6, timeout=20,
                   what="six admitted, six skipped")
        assert sampler.downloader.retried == 0
        assert not breaker.open
    assert [remote.opens[k] for k in keys[:6]] == [1] * 6, "one attempt each"
    with Store(tmp_path / "cache") as store:
        assert {key for key, _, _ in sample_checksums(store)} == set(keys[6:])


def test_failures_worth_another_try_are_retried_then_admitted(tmp_path: Path) -> None:
    """Typed by the remote (transient, unavailable) or by the downloader's own checks (a truncated
    body, a corrupt one): retried, then admitted with the right bytes."""
    objects = objects_of(10, 4096)
    keys = sorted(objects)
    remote = MemoryRemote(objects)
    remote.fail(keys[0], Transient(f"{keys[0]}: BadStatusLine: garbage"))
    remote.fail(keys[1], Unavailable(f"{keys[1]}: HTTP 503 SlowDown", status=503))
    remote.fail(keys[2], TimeoutError("timed out"))  # typed at the remote: unavailable
    remote.damage(keys[3], "truncate")
    remote.damage(keys[4], "corrupt", "truncate")
    settings = settings_for(tmp_path / "cache", "--retries", "3")
    with sampling(tmp_path / "cache", remote, settings) as (store, sampler):
        wait_until(lambda: store.stats().samples == 10, timeout=20, what="every object admitted")
        assert sampler.downloader.retried == 6
        assert store.stats().skipped_total == 0
        got = {key: path.read_bytes() for key, _, path in sample_checksums(store)}
    assert got == objects, "only verified bytes are admitted"
    assert [remote.opens[k] for k in keys[:5]] == [2, 2, 2, 2, 3]


def test_only_unavailable_failures_given_up_count_toward_an_outage(tmp_path: Path) -> None:
    """Both are retried; given up on, a transient failure is skipped like a bad object, while an
    unavailable one counts toward an outage: here one is enough, so its key is kept, fetched again
    after the pause and admitted."""
    objects = objects_of(6)
    keys = sorted(objects)
    remote = MemoryRemote(objects)
    remote.fail(keys[0], *[Transient(f"{keys[0]}: IncompleteRead")] * 2)
    remote.fail(keys[1], *[Unavailable(f"{keys[1]}: ConnectionResetError")] * 2)
    breaker = OutageBreaker(after=1, pause=(0.5, 0.5))
    opened = False

    def done(store: Store) -> bool:
        nonlocal opened
        opened = opened or breaker.open
        return store.stats().samples == 5

    settings = settings_for(tmp_path / "cache", "--retries", "2", "--concurrency", "1")
    with sampling(tmp_path / "cache", remote, settings, breaker) as (store, _):
        wait_until(lambda: done(store), timeout=20, what="all but the transient one admitted")
        assert store.stats().skipped_total == 1
    assert opened, "the unavailable key opened the breaker"
    assert not breaker.open, "the key fetched after the pause closed it again"
    assert remote.opens[keys[0]] == 2 and remote.opens[keys[1]] == 3
    with Store(tmp_path / "cache") as store:
        assert {key for key, _, _ in sample_checksums(store)} == set(keys[1:])


def test_an_outage_keeps_the_keys_and_sampling_resumes(tmp_path: Path) -> None:
    objects = objects_of(30)
    remote = MemoryRemote(objects)
    remote.down.set()
    breaker = OutageBreaker(after=3, pause=(0.05, 0.2))
    settings = settings_for(tmp_path / "cache", "--retries", "1", "--concurrency", "1")
    with sampling(tmp_path / "cache", remote, settings, breaker=breaker) as (store, _):
        wait_until(lambda: breaker.open, timeout=20, what="the breaker to open")
        skipped = store.stats().skipped_total
        assert skipped == 0, "the failures before the outage was seen are kept with it, not skipped"
        wait_until(lambda: sum(remote.opens.values()) >= breaker.after + 3, timeout=20,
                   what="kept keys tried again while down")
        assert store.stats().skipped_total == skipped, "no key is skipped while the remote is down"
        remote.down.clear()
        wait_until(lambda: store.stats().samples == 30 - skipped, timeout=20, what="the rest fetched")
        assert not breaker.open


@pytest.mark.long
def test_backpressure_waits_for_a_cut_and_never_exceeds_the_capacity(tmp_path: Path) -> None:
    objects = objects_of(60, 1024)
    remote = MemoryRemote(objects)
    settings = settings_for(tmp_path / "cache", "--capacity", "10Ki", "--headroom", "0.5",
                            "--keep-epochs", "1")
    seen: list[int] = []

    def within(store: Store) -> bool:
        s = store.stats()
        seen.append(s.cache_bytes + s.inflight_bytes)
        return s.backpressure

    with sampling(tmp_path / "cache", remote, settings) as (store, _):
        wait_until(lambda: store.stats().samples >= 10, timeout=20, what="the cache full")
        assert store.cut() is not None
        wait_until(lambda: within(store), timeout=20, what="backpressure once the epoch pins half")
        fetched = store.stats().fetched_total
        assert store.cut() is not None  # the older epoch retires: its samples become evictable
        wait_until(lambda: store.stats().fetched_total > fetched, timeout=20, what="sampling resumed")
        wait_until(lambda: within(store), timeout=20, what="backpressure again")
    assert max(seen) <= 10 * 1024


def test_fetch_order_passes_over_busy_keys_and_starts_a_new_pass(tmp_path: Path) -> None:
    store = Store(tmp_path / "cache", create=True)
    store.add_catalog([CatalogRow(f"k{i}", sid_of(f"k{i}"), 10, "v", rank=i) for i in range(5)])
    store.finalize_catalog()
    busy = {"k1"}
    order = FetchOrder(store=store, schedule_mode=False, busy=busy.__contains__, inflight=lambda: 0)
    got = [order.next() for _ in range(4)]
    assert [c.key for c in got if c] == ["k0", "k2", "k3", "k4"] and order.passes == 0
    # At the end of the order a new pass starts from the front (nothing was admitted).
    again = order.next()
    assert again is not None and again.key == "k0" and order.passes == 1
    busy.update(f"k{i}" for i in range(5))  # everything in flight: nothing to start
    assert order.next() is None
    store.close()


def test_a_restarted_fetch_order_goes_on_from_the_newest_admissions_not_the_front(tmp_path: Path) -> None:
    """Ranks 50-59 cached, 0-49 evicted since (not cached): a new FetchOrder (a restarted sampler)
    goes on at rank 60, where the last run was, rather than starting a pass at the front (which,
    with a million cached keys, first stepped over all of them). The front comes at the next pass."""
    store = Store(tmp_path / "cache", create=True)
    store.configure(Policy(capacity=1 << 20, keep_epochs=2, min_samples=1, in_use_seconds=60.0))
    store.add_catalog([CatalogRow(f"k{i}", sid_of(f"k{i}"), 10, "v", rank=i) for i in range(100)])
    store.finalize_catalog()
    for i in (57, 50, 59, 51, 52, 53, 54, 55, 56, 58):  # admitted out of order, as downloads finish
        put(store, f"k{i}", 10)
    order = FetchOrder(store=store, schedule_mode=False, busy=lambda key: False, inflight=lambda: 0)
    got = [order.next() for _ in range(41)]
    assert [c.key for c in got if c] == [f"k{i}" for i in range(60, 100)] + ["k0"]
    assert order.passes == 1
    store.close()


def test_breaker_opens_after_a_streak_and_its_pause_doubles_to_a_bound() -> None:
    from epochfs.sidecar.store import Candidate

    b = OutageBreaker(after=2, pause=(1.0, 3.0))
    cands = [Candidate(f"k{i}", sid_of(f"k{i}"), 1, "v") for i in range(5)]
    assert not b.failed(cands[0], "refused")  # held: one failure is not an outage yet
    assert b.is_kept("k0") and b.holding
    assert b.failed(cands[1], "refused") and b.open and b.paused()
    assert not b.holding, "the run-up's key is kept with the outage's"
    pauses = []
    for c in cands[2:]:
        b.paused_until = 0.0
        b.failed(c, "refused")
        pauses.append(round(b.paused_until - time.monotonic()))
    assert pauses == [2, 3, 3]
    assert b.next_kept(lambda k: k == "k0").key == "k1"  # k0 busy: passed over
    b.sent("k1", now=time.monotonic() + 1)  # sent after every failure so far
    assert b.succeeded("k1") == []
    assert not b.open
    b.paused_until = 0.0
    assert not b.failed(cands[0], "refused"), "after a success the streak starts again"
    b.sent("k2", now=time.monotonic() + 1)
    assert b.succeeded("k2") == [] and b.is_kept("k0"), "the remote is up: k0 is fetched once more"
    assert not b.failed(cands[0], "refused", now=time.monotonic() + 2)
    b.sent("k3", now=time.monotonic() + 3)
    assert b.succeeded("k3") == [(cands[0], "refused")], "failed again while the remote answers: skipped"
    with pytest.raises(ValueError):
        OutageBreaker(after=0)
