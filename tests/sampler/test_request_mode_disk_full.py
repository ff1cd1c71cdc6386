"""With the default ``--cut-interval 0`` (cuts only on request), a cache at ``--capacity`` whose
kept epoch pins it, and then another tenant fills the volume: the pause becomes the disk's
(``epochfs_disk_full`` 1) with no cut tried, and "cache full" again once the tenant leaves.

The cuts that mode makes come from the trainer's lookups (the FUSE server's process) and queued
requests: neither tells the loop a full volume refused them, and a "cache full" pause reserves
against the recorded budget without looking at the volume, so the pause kept saying "cache full"
with ``epochfs_disk_full 0`` and EpochfsDiskFull never fired. The loop's tick measures the volume
while it pauses (docs/reliability.md, section 2).

Real parts: a 24 MiB tmpfs shared with "another tenant" (a file that fills it to its last byte,
then deleted), the real ``epochfs sidecar`` on a ``file://`` remote with its FUSE view,
``/metrics`` scraped.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from common import wait_until
from inprocess import fill
from sidecar_helpers import sidecar_on_small_volume

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="mounts a tmpfs and FUSE (root)"),
]

OBJECTS = 400
SIZE = 64 << 10


def test_cache_full_pause_becomes_disk_full_without_any_cut_and_back(tmp_path: Path) -> None:
    with sidecar_on_small_volume(tmp_path, "24m", objects=OBJECTS, size=SIZE,
                                 extra=("--capacity", "12Mi", "--cut-interval", "0")) as (car, vol):
        os.listdir(car.mount / "epoch-0")  # the trainer's first lookup cuts epoch 0
        # The cache at --capacity, epoch 0 pinning it, nothing in flight: paused as "cache full".
        wait_until(lambda: (g := car.gauges()).get("epochfs_backpressure") == 1
                   and g.get("epochfs_disk_full") == 0 and g.get("epochfs_epoch_latest") == 0
                   and g.get("fetched", 0) < OBJECTS,
                   timeout=90, what="the cache full, pinned by epoch 0")
        cuts = car.gauges()["epochfs_cuts_total"]
        filler = fill(vol, leave=0)  # another tenant: the volume full to its last byte
        wait_until(lambda: car.gauges().get("epochfs_disk_full") == 1, timeout=20,
                   what="epochfs_disk_full 1 with no cut tried")
        short = car.gauges()
        assert short["epochfs_backpressure"] == 1 and short["epochfs_cuts_total"] == cuts, short
        filler.unlink()  # the tenant leaves
        wait_until(lambda: (g := car.gauges()).get("epochfs_disk_full") == 0
                   and g.get("epochfs_backpressure") == 1, timeout=20,
                   what="the pause back to cache full")
        assert car.gauges()["epochfs_cuts_total"] == cuts
