"""A lookup of ``epoch-N`` that makes its cut is observed in ``epochfs_cut_wait_seconds`` (issue 23).

The commonest way a cut is asked for is a trainer's ``os.stat(mount / "epoch-N")``. The lookup
queues the cut when its condition does not hold yet (ENOENT, the trainer asks again); the sampler
reports the queued cuts it makes, but a lookup that cut the epoch itself (at once, or on a poll
after the condition came to hold) was never observed, so the histogram missed the commonest
cuts. Here through a real FUSE mount (``epochfs mount`` under ``PROMETHEUS_MULTIPROC_DIR``, as
the supervisor runs it, with no sampler: every cut is a lookup's), read back from the exposition
the sidecar's ``/metrics`` serves (the server's mmap files merged with the supervisor's registry).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fuse_helpers import admit, make_objects, mounted, open_store
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from epochfs.sidecar import metrics
from epochfs.sidecar.store import Store

NEEDS_FUSE = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                                reason="needs root and /dev/fuse")

NAME = "epochfs_cut_wait_seconds"
QUEUED_AGO = 20.0
"""How long ago the first lookup's queued request is made to look (its row's time is what counts)."""


def scrape(store: Store, mpdir: Path) -> dict[tuple[str, str | None], float]:
    """The cut-wait family as the sidecar's ``/metrics`` serves it: (sample name, le) -> value."""
    reg = metrics.sidecar_registry(stats=store.stats, multiproc_dir=mpdir,
                                   sidecar=metrics.SidecarMetrics(registry=CollectorRegistry()))
    [family] = [f for f in text_string_to_metric_families(generate_latest(reg).decode()) if f.name == NAME]
    assert family.type == "histogram"
    return {(s.name, s.labels.get("le")): s.value for s in family.samples}


@pytest.mark.fuse
@NEEDS_FUSE
def test_a_lookup_that_cut_its_epoch_is_in_the_scraped_histogram(tmp_path: Path) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    mpdir = metrics.prepare_multiproc_dir(tmp_path / "metrics")
    store = open_store(cache, min_samples=3)
    admit(store, make_objects(2, 100))
    try:
        with mounted(cache, mnt, env={"PROMETHEUS_MULTIPROC_DIR": str(mpdir)}):
            # Below min-samples: the lookup queues the cut and answers "not yet".
            assert not (mnt / "epoch-0").exists()
            [(n, requested)] = store.pending_cuts()
            assert n == 0
            with store._ix.write() as db:  # queued QUEUED_AGO s ago, without sleeping that long
                db.execute("UPDATE cut_requests SET requested_at=? WHERE n=?", (requested - QUEUED_AGO, n))
            assert scrape(store, mpdir).get((NAME + "_count", None), 0.0) == 0, "nothing cut yet"

            # The condition holds now; the trainer's next stat cuts the epoch (no sampler here).
            admit(store, make_objects(2, 100, start=2))
            os.stat(mnt / "epoch-0")
            assert store.newest_epoch() == 0 and store.pending_cuts() == []
            got = scrape(store, mpdir)
            assert got[(NAME + "_count", None)] == got[(NAME + "_bucket", "+Inf")] == 1
            assert got[(NAME + "_sum", None)] >= QUEUED_AGO, "the wait since the lookup queued the cut"
            assert got[(NAME + "_bucket", "10.0")] == 0 and got[(NAME + "_bucket", "30.0")] == 1

            # A lookup of a live epoch cuts nothing and observes nothing.
            os.stat(mnt / "epoch-0")
            assert scrape(store, mpdir)[(NAME + "_count", None)] == 1

            # A lookup whose cut is made at once: observed with the lookup's own time.
            admit(store, make_objects(4, 100, start=4))
            os.stat(mnt / "epoch-1")
            got = scrape(store, mpdir)
            assert got[(NAME + "_count", None)] == 2
            assert QUEUED_AGO <= got[(NAME + "_sum", None)] < QUEUED_AGO + 30.0
            assert got[(NAME + "_bucket", "10.0")] == 1
    finally:
        store.close()
