"""``epochfs_cut_wait_seconds`` counts every cut asked for, not only those that had to wait (issue 23).

The sampler reports the cuts it makes for queued requests; a ``POST /v1/cut`` that finds the
condition holding cuts at once in the supervisor, and before this that cut was never observed, so
the histogram's count was below the cuts asked for and its quantiles said every cut waited. These
tests read the values back from an injected registry (the supervisor's :class:`SidecarMetrics`),
and from the merged exposition the sidecar serves (the sampler's observations in multiprocess
files, written by a real child process, summed with the supervisor's into one family).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fuse_helpers import admit, make_objects, open_store
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from epochfs.sidecar import cutrequest, metrics
from epochfs.sidecar.cutrequest import CutRequest
from epochfs.sidecar.store import Store

NAME = "epochfs_cut_wait_seconds"


def value(registry: CollectorRegistry, suffix: str, **labels: str) -> float:
    got = registry.get_sample_value(NAME + suffix, labels)
    return 0.0 if got is None else got


def timed(store: Store, req: CutRequest, m: metrics.SidecarMetrics) -> tuple[int, float]:
    """(HTTP status, seconds the answer took)."""
    start = time.monotonic()
    code, _ = cutrequest.answer(store, req, cut_waited=m.cut_waited)
    return code, time.monotonic() - start


class AnotherRankFirst:
    """The store as one request sees it while another rank's request cuts the same epoch between
    its look at the live epochs and its own ask (eight ranks asking for one epoch at once)."""

    def __init__(self, store: Store, n: int) -> None:
        self.store, self.n = store, n

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    def epochs(self) -> object:
        seen = self.store.epochs()
        assert self.store.cut(self.n) == self.n  # the other rank's cut, just after this look
        return seen


def test_a_cut_another_request_made_meanwhile_is_observed_once(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache", min_samples=3)
    admit(store, make_objects(4, 10))
    m = metrics.SidecarMetrics(registry=CollectorRegistry())
    code, doc = cutrequest.answer(AnotherRankFirst(store, 0), CutRequest(0), cut_waited=m.cut_waited)  # type: ignore[arg-type]
    assert (code, doc["state"]) == (200, "live")
    assert value(m.registry, "_count") == 0, "the other rank made the cut: its request reports it"
    store.close()


def test_a_cut_made_at_once_is_observed_and_a_cut_found_is_not(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache", min_samples=3)
    admit(store, make_objects(4, 10))
    m = metrics.SidecarMetrics(registry=CollectorRegistry())
    code, took = timed(store, CutRequest(0), m)
    assert code == 200 and store.newest_epoch() == 0
    # At once: the wait observed is the request's own time (no more than the call took).
    assert value(m.registry, "_count") == 1 and 0 <= value(m.registry, "_sum") <= took
    # Found live, refused (ahead without jump=1): nothing was cut, nothing is observed.
    for req in (CutRequest(0), CutRequest(5), CutRequest(0)):
        cutrequest.answer(store, req, cut_waited=m.cut_waited)
    assert value(m.registry, "_count") == 1
    # A resumed trainer's jump, its condition holding: cut at once, observed.
    before = value(m.registry, "_sum")
    code, took = timed(store, CutRequest(7, jump=True), m)
    assert (code, store.newest_epoch()) == (200, 7)
    assert value(m.registry, "_count") == 2 and 0 <= value(m.registry, "_sum") - before <= took
    store.close()


def test_a_poll_that_cuts_a_queued_epoch_reports_the_wait_since_it_was_queued(tmp_path: Path) -> None:
    """A rank's first request queued epoch 0; the condition came to hold and the rank's next poll
    made the cut before the sampler did: the wait is the queued request's, not the poll's."""
    store = open_store(tmp_path / "cache", min_samples=3)
    admit(store, make_objects(2, 10))
    m = metrics.SidecarMetrics(registry=CollectorRegistry())
    code, _ = cutrequest.answer(store, CutRequest(0), cut_waited=m.cut_waited)
    assert code == 202 and value(m.registry, "_count") == 0
    [(n, requested)] = store.pending_cuts()
    with store._ix.write() as db:  # queued 20 s ago (no sleep: the row's time is what counts)
        db.execute("UPDATE cut_requests SET requested_at=? WHERE n=?", (requested - 20.0, n))
    admit(store, make_objects(2, 10, start=2))
    code, _ = cutrequest.answer(store, CutRequest(0), cut_waited=m.cut_waited)
    assert code == 200 and store.pending_cuts() == []
    assert value(m.registry, "_count") == 1
    assert value(m.registry, "_bucket", le="10.0") == 0 and value(m.registry, "_bucket", le="30.0") == 1
    assert value(m.registry, "_sum") == pytest.approx(20.0, abs=5.0)
    store.close()


def test_the_exposition_has_one_family_with_the_samplers_and_the_supervisors_cuts(tmp_path: Path) -> None:
    mpdir = metrics.prepare_multiproc_dir(tmp_path / "mp")
    sidecar = metrics.SidecarMetrics(registry=CollectorRegistry())
    store = open_store(tmp_path / "cache")
    admit(store, make_objects(1, 10))
    assert cutrequest.answer(store, CutRequest(0), cut_waited=sidecar.cut_waited)[0] == 200
    # The sampler, a process of its own under PROMETHEUS_MULTIPROC_DIR, served a queued cut 1.5 s late.
    code = "from epochfs.sidecar.metrics import process_metrics\nprocess_metrics().cut_waited(1.5)\n"
    subprocess.run([sys.executable, "-P", "-c", code], check=True,
                   env=dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(mpdir)))
    reg = metrics.sidecar_registry(stats=store.stats, multiproc_dir=mpdir, sidecar=sidecar)
    families = [f for f in text_string_to_metric_families(generate_latest(reg).decode()) if f.name == NAME]
    assert len(families) == 1 and families[0].type == "histogram"
    samples = {(s.name, s.labels.get("le")): s.value for s in families[0].samples}
    assert samples[(NAME + "_count", None)] == samples[(NAME + "_bucket", "+Inf")] == 2  # every cut asked for
    own = value(sidecar.registry, "_sum")  # the supervisor's: the request's own time
    assert samples[(NAME + "_sum", None)] == pytest.approx(1.5 + own)
    assert samples[(NAME + "_bucket", "1.0")] == (1 if own <= 1.0 else 0)
    assert samples[(NAME + "_bucket", "2.5")] == (2 if own <= 2.5 else 1)
    store.close()
