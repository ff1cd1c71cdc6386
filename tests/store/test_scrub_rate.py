"""The background scrub reads the cache at ``--scrub-rate`` bytes per second, whatever the size
of the objects: each object's check charges the rate budget the bytes it reads.

A check that charged its whole read buffer (1 MiB) for every read, the one that finds the end of
the file included, made an 8 KiB object cost 2 MiB: at the default 8 MiB/s the scrub checked
about 4 small objects a second, and damage in a cache of small objects went unseen for minutes.

The rate is measured in budget, not in wall-clock time: the scrub's token bucket runs on a
simulated clock that advances by the waits the bucket asks for, so "one second at the rate" is
exactly the bytes the bucket lets through in one second.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from integrity_helpers import damage
from store_helpers import sid_of

from epochfs.sidecar.ratelimit import RateLimiter
from epochfs.sidecar.scrub import Scrubber
from epochfs.sidecar.store import Admission, Policy, Store, object_name
from epochfs.sidecar.store.integrity import BLOCK, MIN_CHARGE, Pace

SMALL = 8 * 1024
"""The size of the small objects (the size the report's cache held)."""


def admit(store: Store, key: str, body: bytes) -> None:
    """Admit ``body`` under ``key`` with its md5 digest, as a download of it would."""
    temp = store.temp_path()
    temp.write_bytes(body)
    md5 = hashlib.md5(body).hexdigest()
    store.admit([Admission(key, sid_of(key), len(body), f"md5:{md5}", md5, temp)])


def body_of(key: str, size: int) -> bytes:
    """``size`` bytes that differ from key to key (no two objects alike)."""
    seed = hashlib.sha256(key.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def small_cache(root: Path, count: int) -> Store:
    """A real cache of ``count`` objects of :data:`SMALL` bytes (the caller closes it)."""
    store = Store(root, create=True)
    store.configure(Policy(capacity=10**9, headroom=0.0))
    for i in range(count):
        admit(store, f"train/{i:05d}.bin", body_of(str(i), SMALL))
    return store


def tally(charges: list[int]) -> Pace:
    """A pace that lets every read go and notes what each one charged."""
    def pace(nbytes: int) -> bool:
        charges.append(nbytes)
        return True
    return pace


class SimulatedBucket(RateLimiter):
    """The scrub's token bucket on a simulated clock: a wait the bucket asks for advances the
    clock instead of sleeping, and the scrub is stopped once the clock would pass ``horizon``
    seconds. What the scrub checked by then is what it checks in ``horizon`` seconds at its
    rate. ``charged`` tallies the bytes the scrub charged."""

    def __init__(self, *, rate: float, burst: float, horizon: float) -> None:
        self.now = 0.0
        self.horizon = horizon
        self.charged = 0
        super().__init__(rate=rate, burst=burst, clock=lambda: self.now)

    def take(self, nbytes: int, stop: threading.Event) -> bool:
        delay = self.reserve(nbytes)
        if self.now + delay > self.horizon:
            stop.set()
            return False
        self.now += delay
        self.charged += nbytes
        return True


def test_checking_an_object_charges_the_bytes_it_reads(tmp_path: Path) -> None:
    """Each check charges the object's size (at least :data:`MIN_CHARGE`, the block a disk
    reads for any file), flipped bytes or not, never a whole buffer per read; one whose size is
    wrong is not read, and charged the least."""
    sizes = [0, 1, 100, SMALL, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 5]
    with Store(tmp_path / "cache", create=True) as store:
        store.configure(Policy(capacity=10**9, headroom=0.0))
        for size in sizes:
            admit(store, f"k{size}", body_of(str(size), size))
        damage(store.objects_dir / object_name(sid_of(f"k{SMALL}")), "flip")
        damage(store.objects_dir / object_name(sid_of(f"k{BLOCK + 1}")), "cut")
        buffer = memoryview(bytearray(BLOCK))
        charged: dict[int, int] = {}
        problems: dict[int, str | None] = {}
        for obj in store.stored_objects(after_id=0, limit=len(sizes)):
            charges: list[int] = []
            problems[obj.size] = store.check_object(obj, pace=tally(charges), buffer=buffer)
            charged[obj.size] = sum(charges)
    assert charged == {size: MIN_CHARGE if size == BLOCK + 1 else max(size, MIN_CHARGE) for size in sizes}
    assert sorted(s for s, p in problems.items() if p is not None) == [SMALL, BLOCK + 1], problems


def test_the_background_scrub_checks_small_objects_at_its_byte_rate(tmp_path: Path) -> None:
    """At ``--scrub-rate 1Mi`` the scrub checks one second's budget of 8 KiB objects in one
    simulated second: (burst + rate) / 8 KiB objects, and charges exactly their bytes."""
    rate = 1 << 20
    with small_cache(tmp_path / "cache", 300) as store:
        stop = threading.Event()
        scrubber = Scrubber(store=store, rate=rate, stop=stop, on_damaged=lambda c: None)
        bucket = SimulatedBucket(rate=rate, burst=scrubber.limiter.burst, horizon=1.0)
        scrubber.limiter = bucket
        scrubber.start()
        scrubber.join(timeout=120)
        assert stop.is_set(), "the scrub ran out of cache before one simulated second"
    budget = int(bucket.burst + rate * bucket.horizon)
    assert scrubber.checked == budget // SMALL, (scrubber.checked, bucket.charged)
    assert bucket.charged == scrubber.checked * SMALL
