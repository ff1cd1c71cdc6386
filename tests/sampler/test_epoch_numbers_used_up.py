"""A cache whose largest epoch number is cut (``epochfs cut --epoch 536870910 --far``) has no
number left for the next cut. The interval's cut then raised the store's ValueError and ended the
sampler at every tick (a traceback; under the sidecar, restarted until /healthz failed). Now the
interval says once that epoch numbers are used up and sampling goes on. A real store, the real
``epochfs sample`` over a local folder."""

from __future__ import annotations

from pathlib import Path

from common import random_objects, wait_until
from folderview_helpers import write_remote
from fuse_helpers import admit, make_objects, open_store
from sampler_helpers import running_sampler

from epochfs.sidecar.store import MAX_EPOCH


def test_the_interval_stops_cutting_when_epoch_numbers_are_used_up(tmp_path: Path) -> None:
    remote = tmp_path / "ds"
    objects = random_objects(20, 1_000)
    write_remote(remote, objects)
    cache = tmp_path / "cache"
    with open_store(cache) as store:
        admit(store, make_objects(2, 100, prefix="old/"))
        assert store.cut(MAX_EPOCH, far=True) == MAX_EPOCH
    with running_sampler(cache, f"file://{remote}", "--cut-interval", "0.2") as sp:
        wait_until(lambda: "the largest epoch number, is cut already" in sp.log_text(),
                   what="the used-up numbers said")
        wait_until(lambda: sp.stats()["samples"] >= 2 + len(objects), what="sampling going on")
        assert sp.proc.poll() is None
        log = sp.log_text()
    assert log.count("the largest epoch number, is cut already") == 1
    assert "Traceback" not in log
