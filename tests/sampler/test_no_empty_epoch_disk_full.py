"""On a volume that can hold nothing more, no cut publishes an empty epoch, and sampling resumes
once the room is back.

The sampler then records a budget of 1 byte ("1 byte where it can hold nothing", docs/sampler.md
"Disk space"), and every cut, a lookup's and ``epochfs cut``'s, published an epoch of no file from
a cache of hundreds of readable samples: a trainer read 47 of them in a second without an error,
and they took the --keep-epochs slots of the real ones. Now such a cut holds the newest cached
samples within the newest epoch's size. That cut is also what the paused sampler waits for (it
fetches a share of the headroom per cut, with --keep-epochs 2): refusing it left sampling paused
after the room was back. The cache lives on a small tmpfs of its own, another tenant's file
fills it, and the sampler's loop runs in-process.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from common import wait_until
from inprocess import fill, objects_of, sampling, settings_for, small_volume

from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.store import Stats

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")


@pytest.mark.long
def test_epochs_stay_real_on_a_full_volume_and_sampling_resumes(tmp_path: Path) -> None:
    objects = objects_of(300, 32 * 1024)
    with small_volume(tmp_path / "vol", "20m") as vol:
        cache = vol / "cache"
        settings = settings_for(cache, "--capacity", "4Mi", "--keep-epochs", "2")
        with sampling(cache, MemoryRemote(objects), settings) as (store, _):
            wait_until(lambda: store.stats().samples >= 100, timeout=30, what="samples")
            assert store.cut() == 0
            # Another tenant: less than the margin (8 MiB) beyond the cache is left, so the budget
            # the volume allows is 1 byte, while the index still has room to record cuts.
            filler = fill(vol, leave=3 << 20)

            def trainer_asks(more: Callable[[Stats], bool]) -> Callable[[], bool]:
                """A trainer's lookup of its next epoch (a cut, or "not yet"), then ``more``."""
                def ask() -> bool:
                    store.request_cut(store.next_epoch())
                    return more(store.stats())
                return ask

            # Each cut lets the paused sampler fetch a share: it then finds the volume full.
            wait_until(trainer_asks(lambda s: s.capacity_bytes == 1 and s.backpressure_reason == "disk full"),
                       timeout=30, interval=0.5, what="a budget of 1 byte, sampling paused on the volume")
            newest = store.newest_epoch()
            wait_until(lambda: store.request_cut(store.next_epoch()), timeout=10,  # (the index may be busy)
                       what="a lookup of the next epoch served")
            assert store.cut() == store.next_epoch() - 1 == (newest or 0) + 2, "epochfs cut (and the timer)"
            held = [e["samples"] for e in store.stats().epochs]
            assert min(held) > 0, f"every epoch published holds samples: {held}"
            fetched = store.stats().fetched_total
            filler.unlink()
            wait_until(trainer_asks(lambda s: s.fetched_total > fetched and s.capacity_bytes > 1),
                       timeout=30, interval=0.5, what="sampling resumed once the room is back")
            held = [e["samples"] for e in store.stats().epochs]
            assert min(held) > 0, held
