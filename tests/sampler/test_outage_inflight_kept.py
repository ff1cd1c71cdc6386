"""Keys whose downloads failed as unavailable are never skipped because of an outage, whatever
else completes meanwhile; a key that fails while the remote answers others still is.

docs/sampler.md: the objects given up in an outage's run-up "are not skipped either: they are
held ... and fetched once the remote is back". With 32 downloads in flight and ``--max-rate``,
the bodies already answered are still being read after the remote dies; counted as "the remote is
up", those completions would have 24-28 of 300 keys that failed meanwhile skipped for good (two
reviewers' runs of a sidecar on moto). An answer tells only about failures that came before its
request was sent; a key whose failure a later answer cleared is fetched once more, and skipped
only when that happens twice.

Real parts: the sampler's loop, its breaker and the store; the remote is the in-memory one, down
while ``down`` is set, with bodies that the test lets flow when it chooses (no timing involved).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from common import wait_until
from inprocess import objects_of, sampling, settings_for

from epochfs.sidecar.remote.base import Unavailable
from epochfs.sidecar.remote.testing import MemoryReader, MemoryRemote
from epochfs.sidecar.sampler.breaker import OutageBreaker
from epochfs.sidecar.store import Store


class HeldBody(MemoryReader):
    """A body the remote answered, read only once ``flow`` is set (a body still on its way)."""

    def __init__(self, body: bytes, flow: threading.Event) -> None:
        super().__init__(body, hashlib.md5(body).hexdigest())
        self._flow = flow

    def read(self, n: int) -> bytes:
        self._flow.wait()
        return super().read(n)


class AnswersThenDown(MemoryRemote):
    """Answers its first ``answered`` GETs with bodies held back until :attr:`flow` is set, and
    is down (connection refused) from the next GET on, until the test clears ``down``."""

    def __init__(self, objects: dict[str, bytes], answered: int) -> None:
        super().__init__(objects)
        self.flow = threading.Event()
        self.answered: list[str] = []
        self._left = answered

    def open(self, key: str, *, checksum: bool = False) -> MemoryReader:
        with self._lock:
            answer = self._left > 0 and not self.down.is_set()
            if answer:
                self._left -= 1
                self.answered.append(key)
                self.opens[key] = self.opens.get(key, 0) + 1
                if self._left == 0:  # under the lock: every later open finds the remote down
                    self.down.set()
        if not answer:
            return super().open(key, checksum=checksum)
        return HeldBody(self.objects[key], self.flow)


@contextmanager
def flowing_at_exit(remote: AnswersThenDown) -> Iterator[None]:
    """Let the held bodies flow whatever happens, so that the sampler's workers can stop."""
    try:
        yield
    finally:
        remote.flow.set()


def test_downloads_answered_before_an_outage_do_not_get_its_failed_keys_skipped(tmp_path: Path) -> None:
    """Three bodies answered just before the remote goes down come through after every other key
    has failed: those completions tell nothing about the failures, which came after their
    requests. The breaker needs more failures in a row than there are keys, so only the
    completions could end the run-up: the failed keys must stay held, then be fetched."""
    objects = objects_of(40, 4096)
    remote = AnswersThenDown(objects, answered=3)
    breaker = OutageBreaker(after=len(objects) + 1, pause=(0.05, 0.2))
    cache = tmp_path / "cache"
    settings = settings_for(cache, "--capacity", "4Mi", "--retries", "1", "--concurrency", "8")
    with sampling(cache, remote, settings, breaker=breaker) as (store, _), flowing_at_exit(remote):
        try:
            wait_until(lambda: len(remote.answered) == 3
                       and all(breaker.is_kept(k) for k in objects if k not in remote.answered),
                       timeout=30, what="every other key failed and held while three bodies are held back")
        except TimeoutError as e:  # what the sampler was at, should it ever time out
            loose = sorted(k for k in objects if k not in remote.answered and not breaker.is_kept(k))
            raise AssertionError(f"{e}: answered {remote.answered}; not held: {loose[:10]} of {len(loose)}; "
                                 f"opens {sum(remote.opens.values())}; {store.stats().to_json()}") from e
        failed_once = sum(remote.opens.values())
        remote.flow.set()
        wait_until(lambda: store.stats().samples == 3, timeout=30, what="the three bodies admitted")
        wait_until(lambda: store.stats().skipped_total > 0 or sum(remote.opens.values()) > failed_once,
                   timeout=30, what="the held keys skipped, or fetched again")
        assert store.stats().skipped_total == 0, (
            "keys that failed as unavailable were skipped on the strength of downloads answered "
            "before they failed")
        remote.down.clear()
        wait_until(lambda: store.stats().samples == len(objects), timeout=30,
                   what="every key once the remote is back")
        assert store.stats().skipped_total == store.stats().failed_total == 0


def test_keys_failed_with_nothing_else_left_are_fetched_again_not_skipped(tmp_path: Path) -> None:
    """The remote dies under the last downloads of the list: nothing else is left whose answer
    could tell an outage from bad objects, so the failed keys are tried again (and the outage is
    told by their failures), never skipped."""
    objects = objects_of(3, 4096)
    remote = MemoryRemote(objects)
    remote.down.set()
    breaker = OutageBreaker(after=5, pause=(0.05, 0.2))
    cache = tmp_path / "cache"
    settings = settings_for(cache, "--capacity", "4Mi", "--retries", "1", "--concurrency", "4")
    with sampling(cache, remote, settings, breaker=breaker) as (store, _):
        wait_until(lambda: store.stats().skipped_total > 0 or breaker.open, timeout=30,
                   what="the failed keys skipped, or the outage told")
        assert store.stats().skipped_total == 0, "the last keys were skipped for an outage"
        remote.down.clear()
        wait_until(lambda: store.stats().samples == len(objects), timeout=30,
                   what="every key once the remote is back")
        assert store.stats().skipped_total == store.stats().failed_total == 0


class OneBadObject(MemoryRemote):
    """The first key asked for answers HTTP 500 to every GET; the others come through."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        super().__init__(objects)
        self.bad: str | None = None

    def open(self, key: str, *, checksum: bool = False) -> MemoryReader:
        with self._lock:
            self.bad = self.bad or key
        if key == self.bad:
            super().open(key, checksum=checksum)  # counted
            raise Unavailable(f"{key}: HTTP 500 InternalError")
        return super().open(key, checksum=checksum)


def test_an_object_that_fails_while_the_remote_answers_others_is_skipped_after_one_more_try(
        tmp_path: Path) -> None:
    objects = objects_of(20, 4096)
    remote = OneBadObject(objects)
    cache = tmp_path / "cache"
    settings = settings_for(cache, "--capacity", "4Mi", "--retries", "1", "--concurrency", "2")
    with sampling(cache, remote, settings) as (store, _):
        wait_until(lambda: store.stats().samples + store.stats().skipped_total == len(objects),
                   timeout=30, what="every key admitted or skipped")
        assert store.stats().skipped_total == store.stats().failed_total == 1
    assert remote.bad is not None and remote.opens[remote.bad] == 2, "one more try, then skipped"
    with Store(cache) as store:
        assert store.stats().samples == len(objects) - 1


def test_an_answer_clears_only_the_failures_before_its_request_was_sent() -> None:
    """The breaker alone, with the times given: what an answer tells depends on when its
    download was sent, not on when it came back."""
    from epochfs.sidecar.store import Candidate

    b = OutageBreaker(after=3, pause=(1.0, 4.0))
    cands = [Candidate(f"k{i}", f"s{i}", 1, "v") for i in range(6)]
    b.sent("early", now=0.0)
    b.sent("between", now=15.0)
    assert not b.failed(cands[0], "refused", now=10.0)
    assert not b.failed(cands[1], "refused", now=20.0)
    assert b.succeeded("early") == [] and not b.open, "sent before both failures: tells nothing"
    assert b.is_kept("k0") and b.is_kept("k1")
    assert b.failed(cands[2], "refused", now=30.0) and b.open, "three in a row: the outage"
    b.sent("k3", now=5.0)
    assert b.succeeded("k3") == [] and b.open, "a stale answer leaves the outage open"
    assert b.succeeded("between") == [] and not b.open, "two failures after it: short of an outage"
    b.sent("k2", now=40.0)
    assert b.succeeded("k2") == [] and not b.open, "the remote answered after every failure"
    b.paused_until = 0.0
    assert not b.failed(cands[4], "refused", now=50.0)
    b.sent("k5", now=60.0)
    assert b.succeeded("k5") == [] and b.is_kept("k4"), "cleared once: fetched once more"
    kept = iter(lambda: b.next_kept(lambda key: False), None)
    assert [c.key for c in kept] == ["k0", "k1", "k2", "k4"], "the outage's keys, then k4"
    b.sent("k4", now=70.0)
    assert not b.failed(cands[4], "refused", now=80.0)
    b.sent("k5", now=90.0)
    assert b.succeeded("k5") == [(cands[4], "refused")], "cleared twice: its failures are its own"
