"""docs/shards.md, "What a shard means for sampling", with a real ``epochfs sidecar`` and its mount.

A ``file://`` remote holds tar shards beside other files; the sidecar runs with the page's flags
(``--include 'shards/*.tar' --min-samples``) and a capacity of a few shards: only shard files are
fetched (the others counted in status), epoch 0 holds at least ``--min-samples`` shards, every
epoch's shards are whole (their bytes are the remote's, every record there) and within the epoch
budget, and later epochs hold other shards than epoch 0 (whole shards were evicted for them).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from common import wait_until
from shards_helpers import tar_members, tar_shard
from sidecar_helpers import running_sidecar

from epochfs.torchclient import EpochDataset

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]

SHARDS, PER_SHARD, MIN_SAMPLES = 12, 8, 3


def status(mount: Path) -> dict:
    try:
        return json.loads((mount / ".epochfs" / "status.json").read_text())
    except (OSError, ValueError):
        return {}


@pytest.mark.long
def test_the_sidecar_caches_and_counts_whole_shards_only(tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    (remote / "shards").mkdir(parents=True)
    bodies = {f"shards/train-{s:05d}.tar": tar_shard(s, PER_SHARD) for s in range(SHARDS)}
    others = {"README.md": b"# the dataset\n", "shards/index.json": b"{}", "meta/classes.txt": b"a\nb\n"}
    for key, body in (bodies | others).items():
        (remote / key).parent.mkdir(parents=True, exist_ok=True)
        (remote / key).write_bytes(body)
    largest = max(len(b) for b in bodies.values())
    capacity = 6 * largest  # an epoch lists at most 75% of it: 4 shards (4.5 of the largest)
    budget = capacity * 3 // 4
    with running_sidecar(tmp_path, remote=f"file://{remote}", endpoint="", extra=(
            "--include", "shards/*.tar", "--min-samples", str(MIN_SAMPLES), "--capacity", str(capacity),
            "--concurrency", "2", "--keep-epochs", "1", "--in-use-seconds", "1",
            "--retire-grace", "1")) as car:  # the least grace: each eviction for a newer shard waits it
        mount = car.mount
        seen: set[str] = set()
        fetched = 0
        for n in range(4):
            if n:  # the next cut holds newer shards only once one was fetched since the last cut: when the
                # cache is full, that is once the older epochs retire and their shards are evicted for it
                wait_until(lambda last=fetched: status(mount).get("fetched_total", 0) > last, timeout=60,
                           what="a shard fetched since the last cut")
            fetched = status(mount).get("fetched_total", 0)
            epoch = EpochDataset(mount, n, include="*.tar", progress=None, timeout=60)
            assert epoch.excluded == 0, "a file that --include left out reached an epoch"
            assert len(epoch) >= MIN_SAMPLES and epoch.nbytes <= budget, (len(epoch), epoch.nbytes, budget)
            for i, rel in enumerate(epoch.files):
                body = epoch.path(i).read_bytes()
                assert body == bodies[rel], f"{rel}: not the remote's bytes"
                assert len(tar_members(body)) == 2 * PER_SHARD  # every record of the shard
            seen |= set(epoch.files)
            epoch.release()
        assert len(seen) > budget // largest, "no shard was evicted for newer ones over four epochs"
        assert status(mount)["evicted_total"] > 0
        wait_until(lambda: status(mount).get("listing", {}).get("excluded") == len(others), timeout=60,
                   what="the listing's count of files left out")
        objects = [p for p in (car.cache / "objects").rglob("*") if p.is_file()]
        assert objects and all(p.read_bytes()[257:262] == b"ustar" for p in objects), \
            "a file other than a tar shard was fetched"
