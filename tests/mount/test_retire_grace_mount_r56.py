"""An epoch the mount still lists reads whole, byte for byte, right after the sampler retired it
and evicted in the same step.

The FUSE view answers from a snapshot of the live epochs that it refreshes every half second, so
for that long after a retirement it still lists and looks up the epoch; the sampler's tick retires
and then evicts at once. Each round here does that step (``evict`` at the sampler's clock, which
retires first), then reads the retired epoch, whose folder a reader walked just before (as a
trainer inside it has), through the mount: every file must read with its bytes. A failure counts
only while the mount still lists the epoch after it (once the view has refreshed, the epoch is
gone by design); the test also checks that some round was read before the refresh, so it can fail.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import admit, make_objects, mounted, open_store

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]

BATCH, SIZE, ROUNDS = 20, 4096, 6
"""Each epoch's own samples (the epoch budget holds one batch; the capacity all of them)."""

AHEAD = 1000.0
"""Seconds the sampler's clock runs ahead of the wall clock: the mount's read records (at the wall
clock) are out of their in-use window by then, so each round's old epoch retires."""


def _unreadable(folder: Path, objects: dict[str, bytes]) -> list[str]:
    """The files of ``objects`` under ``folder`` that do not read with their bytes through the
    mount (missing, or other bytes), each with why."""
    bad = []
    for key, body in objects.items():
        try:
            data = (folder / key).read_bytes()
        except OSError as e:
            bad.append(f"{key}: {e}")
            continue
        if data != body:
            bad.append(f"{key}: other bytes")
    return bad


def _listed(folder: Path) -> list[str]:
    """The files under ``folder`` as a walk through the mount lists them (relative paths)."""
    return [str((Path(d) / f).relative_to(folder)) for d, _, names in os.walk(folder) for f in names]


@pytest.mark.long
@pytest.mark.parametrize("api", ["lowlevel", "highlevel"])
def test_a_listed_epoch_reads_whole_after_the_sampler_retires_and_evicts(tmp_path: Path, api: str) -> None:
    cache = tmp_path / "cache"
    store = open_store(cache, capacity=(ROUNDS + 2) * BATCH * SIZE, keep_epochs=1,
                       headroom=1 - 1 / (ROUNDS + 2))
    batches = {0: make_objects(BATCH, SIZE, seed=1)}
    admit(store, batches[0])
    assert store.cut(0) == 0
    seen_listed, broken = 0, []
    try:
        with mounted(cache, tmp_path / "mnt", args=("--fuse-api", api)) as m:
            for n in range(1, ROUNDS + 1):
                batches[n] = make_objects(BATCH, SIZE, seed=n + 1, start=n * BATCH)
                admit(store, batches[n])
                assert store.cut(n) == n
                old = m.path / f"epoch-{n - 1}"
                wait_until(lambda n=n: f"epoch-{n}" in os.listdir(m.path), what=f"epoch-{n} listed")
                # A reader inside the old epoch: its tree is built and its names are looked up.
                assert sorted(_listed(old)) == sorted(batches[n - 1])
                store.evict((ROUNDS + 2) * BATCH * SIZE, now=time.time() + AHEAD)  # the sampler's step
                bad = _unreadable(old, batches[n - 1])
                still = f"epoch-{n - 1}" in os.listdir(m.path)
                if still:
                    seen_listed += 1
                    if bad:
                        broken.append(f"epoch-{n - 1}: {len(bad)} of {BATCH} unreadable, e.g. {bad[0]}")
                wait_until(lambda o=old: not o.exists(), what=f"{old.name} gone from the mount")
    finally:
        store.close()
    assert broken == []
    assert seen_listed > 0, "every round's epoch left the mount before its walk: nothing was checked"
