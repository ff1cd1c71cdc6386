"""Once the cache's volume has room again, the "disk full" pause ends by itself, with no epoch cut.

docs/sampler.md ("Disk space") measures the room at most once a second and records the budget the
disk allows again once it has grown; the EpochfsDiskFull runbook says sampling resumes by itself.
With an epoch live and the budget the short volume allowed spent, a reservation is refused against
that recorded budget before the volume is looked at again, so the pause has to measure it: a
volume freed while an epoch is live must not keep ``epochfs_disk_full`` at 1, the budget shrunk and
the fetch stopped until the trainer's next epoch (an hour for a GPU-bound epoch).

Real parts: a 64 MiB tmpfs shared with "another tenant" (a 40 MiB file; later deleted, or the
tmpfs remounted at 128 MiB), the real ``epochfs sidecar`` on a ``file://`` remote with its FUSE
view, ``/metrics`` scraped.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from common import wait_until
from inprocess import small_volume
from sidecar_helpers import running_sidecar

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="mounts a tmpfs and FUSE (root)"),
]

CAPACITY = 40 << 20
OBJECTS = 200
SIZE = 128 << 10
TENANT = 40 << 20




def _remote(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(OBJECTS):
        (data / f"{i:03d}.bin").write_bytes(bytes([i]) * SIZE)
    return data


def _make_room(vol: Path, tenant: Path, how: str) -> None:
    """The operator's way out: the tenant's file deleted, or the volume enlarged (a tmpfs
    remounted larger, as an expanded PVC)."""
    if how == "deleted":
        tenant.unlink()
    else:
        subprocess.run(["mount", "-o", "remount,size=128m", str(vol)], check=True)


@pytest.mark.parametrize("how", ["deleted", "enlarged"])
def test_disk_full_ends_and_fetching_resumes_once_the_volume_has_room_without_a_cut(
        tmp_path: Path, how: str) -> None:
    remote = _remote(tmp_path)
    with small_volume(tmp_path / "vol", "64m") as vol:
        tenant = vol / "other-tenant.bin"
        tenant.write_bytes(b"\0" * TENANT)  # another writer on the volume
        with running_sidecar(vol, remote=f"file://{remote}", endpoint="",
                             extra=("--capacity", "40Mi")) as car:
            os.listdir(car.mount / "epoch-0")  # the trainer's first lookup cuts epoch 0
            wait_until(lambda: (g := car.gauges()).get("epochfs_epoch_latest") == 0
                       and g.get("epochfs_disk_full") == 1 and g.get("epochfs_sampler_idle") == 0,
                       timeout=60, what="epoch 0 live and sampling paused as disk full")
            short = car.gauges()
            assert short["epochfs_cache_capacity_bytes"] < CAPACITY, short
            assert short["fetched"] < OBJECTS, short
            _make_room(vol, tenant, how)  # room for --capacity again
            wait_until(lambda: car.gauges().get("epochfs_disk_full") == 0, timeout=20,
                       what="epochfs_disk_full back to 0 with no cut")
            wait_until(lambda: car.gauges().get("epochfs_cache_capacity_bytes") == CAPACITY,
                       timeout=20, what="the budget back to --capacity")
            wait_until(lambda: car.gauges()["fetched"] > short["fetched"], timeout=20,
                       what="samples fetched again with no cut")
            after = car.gauges()
            assert after["epochfs_epoch_latest"] == 0 and after["epochfs_epochs_live"] == 1, after
            assert "has room for --capacity" in car.log_text()
