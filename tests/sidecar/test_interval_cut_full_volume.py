"""A cache at ``--capacity`` whose kept epochs pin it, and then another tenant fills the volume:
the interval's cut the volume refuses makes the pause the disk's, said in the log, and cuts
resume once room returns.

Every interval cut then fails writing the high-water mark (ENOSPC). The sampler dropped that
failure without a line, and the pause kept saying "cache full; waiting for a cut" with
``epochfs_disk_full 0`` for as long as the tenant stayed: the cut it waited for could never be
made, and neither EpochfsDiskFull nor EpochfsBackpressure fired (docs/reliability.md, section 2,
promises "disk full" there).

Real parts: a 24 MiB tmpfs shared with "another tenant" (a file that fills it to its last byte,
then deleted), the real ``epochfs sidecar`` on a ``file://`` remote with its FUSE view,
``/metrics`` scraped. The index cannot grow on that volume either, so status and the view's
``status.json`` say "disk full" only where the index can take it (docs/reliability.md); the
sampler's own gauge says it at once, and it is what EpochfsDiskFull reads.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from common import wait_until
from inprocess import fill
from sidecar_helpers import Sidecar, sidecar_on_small_volume

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="mounts a tmpfs and FUSE (root)"),
]

OBJECTS = 400
SIZE = 64 << 10
INTERVAL = 5




def _reason(car: Sidecar) -> str | None:
    """The pause's reason as the trainer's view says it (``status.json``)."""
    try:
        doc = json.loads((car.mount / ".epochfs" / "status.json").read_text())
    except (OSError, ValueError):  # replaced meanwhile
        return None
    reason = doc.get("backpressure_reason")
    return None if reason is None else str(reason)


def _settled(log: str) -> bool:
    """Two progress lines since the last cut, with no sample fetched between them: the paused
    sampler fetched the share that cut allowed and waits for the next one."""
    after = log.rpartition("INFO cut epoch ")[2]
    fetched = re.findall(r"(\d+) sample\(s\) fetched this run", after)
    return len(fetched) >= 2 and fetched[-1] == fetched[-2]


def _progress_lines(car: Sidecar) -> int:
    return car.log_text().count("sample(s) fetched this run")


@pytest.mark.long
def test_interval_cuts_refused_by_a_full_volume_pause_as_disk_full_and_resume(tmp_path: Path) -> None:
    with sidecar_on_small_volume(tmp_path, "24m", objects=OBJECTS, size=SIZE,
                                 extra=("--capacity", "12Mi", "--cut-interval", str(INTERVAL),
                                        "--in-use-seconds", "2")) as (car, vol):
        # The cache at --capacity, the kept epochs pinning it: paused until the next cut, with
        # the share a cut allows fetched (nothing written until that cut).
        wait_until(lambda: (g := car.gauges()).get("epochfs_backpressure") == 1
                   and g.get("epochfs_disk_full") == 0 and g.get("epochfs_cuts_total", 0) >= 2
                   and _settled(car.log_text()),
                   timeout=90, what="the cache full, pinned by kept epochs, between two cuts")
        filler = fill(vol, leave=0)  # another tenant: the volume full to its last byte
        wait_until(lambda: "cannot cut epoch" in car.log_text(), timeout=4 * INTERVAL + 10,
                   what="the refused interval cut in the log")
        line = next(s for s in car.log_text().splitlines() if "cannot cut epoch" in s)
        assert "the cache's volume is full" in line, line
        wait_until(lambda: car.gauges().get("epochfs_disk_full") == 1, timeout=20,
                   what="epochfs_disk_full 1 while the cut is refused")
        cuts = car.gauges()["epochfs_cuts_total"]
        # The pause stays the disk's across the interval cuts refused next (the sampler's
        # progress line comes once a second here).
        lines = _progress_lines(car)
        wait_until(lambda: _progress_lines(car) >= lines + 2 * INTERVAL + 1, timeout=30,
                   what="more interval cuts refused")
        still = car.gauges()
        assert (still.get("epochfs_disk_full"), still["epochfs_cuts_total"]) == (1, cuts), still
        filler.unlink()  # the tenant leaves
        wait_until(lambda: car.gauges()["epochfs_cuts_total"] >= cuts + 2, timeout=6 * INTERVAL + 20,
                   what="interval cuts again once room returns")
        wait_until(lambda: car.gauges().get("epochfs_disk_full") == 0, timeout=20,
                   what="epochfs_disk_full back to 0")
        assert _reason(car) != "disk full"
        log = car.log_text()
        assert "cuts resume: epoch " in log, log[-3000:]
        refused = [s for s in log.splitlines() if "cannot cut epoch" in s]
        assert len(refused) == 1, refused  # said at most once a minute
