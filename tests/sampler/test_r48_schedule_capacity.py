"""Schedule mode on a volume that cannot hold --capacity.

Every node cuts epoch N from the same window of the shared order, trimmed to the epoch budget
--capacity gives. The sampler recorded the smaller, disk-limited capacity in the store while the
fetch order kept the window it had computed with --capacity: the cut's window then shrank to other,
unfetched keys and epoch 0 was never cut; and a node whose budget is its disk's cuts other epochs
than the rest. A volume that could never hold --capacity is refused at the start (exit 2); one
short of room for a while keeps the budget and pauses as "disk full" until the room is back.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

from common import wait_until
from inprocess import fill, objects_of, sampling, settings_for, small_volume
from sampler_helpers import EPOCHFS

from epochfs.sidecar.remote.testing import MemoryRemote

KiB = 1024
MiB = 1024 * KiB


def test_a_volume_that_cannot_hold_the_capacity_is_refused_in_schedule_mode(tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    remote.mkdir()
    for i in range(20):
        (remote / f"{i:03d}.bin").write_bytes(bytes([i]) * 4096)
    with small_volume(tmp_path / "vol", "16m") as vol:
        proc = subprocess.Popen(
            [EPOCHFS, "sample", "--cache", str(vol / "cache"), "--remote", f"file://{remote}",
             "--list-process", "0", "--capacity", "100Mi", "--schedule", "initial=8,growth=1.1"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)
            raise AssertionError("the sampler ran on a volume that cannot hold --capacity") from None
    assert proc.returncode == 2, err
    last = err.strip().splitlines()[-1]
    assert "--capacity" in last and "--schedule" in last and "lower --capacity" in last, last


def test_a_volume_short_of_room_keeps_the_schedule_budget_and_cuts_the_same_epoch(tmp_path: Path) -> None:
    objects = objects_of(100, size=64 * KiB)
    with small_volume(tmp_path / "vol", "24m") as vol:
        cache = vol / "cache"
        cache.mkdir()
        filler = fill(vol, leave=9 * MiB + 512 * KiB)  # about 1.5 MiB above the margin kept free
        settings = settings_for(cache, "--capacity", "4Mi", "--schedule", "initial=32,growth=1.2",
                                "--cut-interval", "0", "--scrub-rate", "0")
        with sampling(cache, MemoryRemote(objects), settings) as (store, _sampler):
            lo, hi = store.schedule_window(0)
            assert (lo, hi) == (0, 32), "window 0 fits the budget of --capacity whole (2 MiB)"
            wait_until(lambda: store.stats().backpressure_reason == "disk full", timeout=30,
                       what="a pause for room on the disk")
            assert store.policy().capacity == 4 * MiB, "the budget stays --capacity's"
            assert store.schedule_window(0) == (lo, hi)
            assert store.cut(0) is None, "window 0 is not all cached yet"
            filler.unlink()
            wait_until(lambda: store.cut(0) == 0, timeout=30, what="epoch 0 cut once the room is back")
            files = store.epoch_files(0)
            assert len(files) == 32, "the whole window, as every node with room cuts it"
            assert store.policy().capacity == 4 * MiB
