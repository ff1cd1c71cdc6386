"""A sampler that cannot start, for room or for the remote, is a wait: named for its cause, counted
apart from restarts, and a full volume is ``epochfs_disk_full``.

Before: a cache volume already full when the sidecar started made the sampler exit 75 at every
start, which the supervisor worded as the remote's (``retrying: "remote unreachable: --cache: …
the cache's volume is full …"``, ``sampler could not reach the remote (exit 75 …)``), with
``epochfs_disk_full 0`` (the sampler exits before it sets its gauge), so EpochfsDiskFull could not
fire; those exits, and a remote answering 40 s late at the pod's start, counted in
``epochfs_child_restarts_total``, which fired EpochfsChildRestarting for 15 minutes on a healthy
pod; and the supervisor's restarts were held at their last save, which a full volume refuses.

The real ``epochfs sidecar`` on a real 256 KiB tmpfs (the supervisor opens the index, the sampler's
start finds no room to write it), a real remote nobody answers on, a real full tmpfs for the saves.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest
import sidecar_helpers
from common import wait_until
from inprocess import fill, small_volume
from observability_helpers import StoreObservability, scraped
from prometheus_client.parser import text_string_to_metric_families
from sidecar_helpers import Sidecar, running_sidecar

from epochfs.sidecar.store import Meta, Store

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")
needs_fuse = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                                reason="needs root and FUSE")

HEALTH_PORT = 29702
"""The sidecars' health port here (this test's block of ports: 29700-29799)."""
SILENT_REMOTE = "http://127.0.0.1:29703"
"""An endpoint nothing listens on: the remote unreachable at every start."""


def _retries(car: Sidecar) -> float:
    """The sampler's retries, 0 until ``/metrics`` answers (the sidecar still starting)."""
    code, body = car.get("/metrics")
    if code != 200:
        return 0.0
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            if s.name == "epochfs_child_retries_total" and s.labels == {"child": "sampler"}:
                return float(s.value)
    return 0.0


def _retrying(car: Sidecar) -> str:
    return str(car.health().get("children", {}).get("sampler", {}).get("retrying", ""))


@pytest.fixture
def our_port(monkeypatch: pytest.MonkeyPatch) -> int:
    """The health port of this test's block for ``running_sidecar``, and keys for the remote (its
    silence, not a missing key, is what the sampler must meet)."""
    monkeypatch.setattr(sidecar_helpers, "free_port", lambda: HEALTH_PORT)
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1"), ("EPOCHFS_KUBE_REPORTING", "0")):
        monkeypatch.setenv(name, value)
    return HEALTH_PORT


@pytest.mark.long
@pytest.mark.fuse
@needs_fuse
def test_a_volume_full_at_the_start_is_disk_full_not_the_remote(tmp_path: Path, our_port: int) -> None:
    data = tmp_path / "data" / "train"
    data.mkdir(parents=True)
    for i in range(4):
        (data / f"{i}.bin").write_bytes(os.urandom(2000))
    with small_volume(tmp_path / "vol", "256k") as vol:
        (vol / "cache").mkdir()
        (tmp_path / "cache").symlink_to(vol / "cache")  # where running_sidecar puts the cache
        with running_sidecar(tmp_path, remote=data.as_uri(), endpoint=SILENT_REMOTE,
                             expect_ready=False) as car:
            wait_until(lambda: _retries(car) >= 2
                       or car.proc.poll() is not None, timeout=60, what="two retries of the sampler")
            assert car.proc.poll() is None, car.log_text()[-3000:]
            retrying = _retrying(car)
            assert retrying.startswith("disk full: --cache: "), retrying
            assert "the cache's volume is full" in retrying, retrying
            code, body = car.get("/readyz")
            reason = json.loads(body)["reason"]
            assert code == 503 and reason.startswith("disk full: --cache: "), (code, reason)
            assert car.metric("epochfs_disk_full") == 1
            assert car.metric("epochfs_child_restarts_total", child="sampler") == 0
            log = car.log_text()
            assert "sampler found the cache's volume full at its start (exit 75 after" in log, log[-3000:]
            assert "could not reach the remote" not in log, log[-3000:]
            # Room again (the volume enlarged): the sampler starts, and the gauge goes back to 0
            # once its run got through (the retry line's life: 30 s of running).
            subprocess.run(["mount", "-o", "remount,size=16m", str(vol)], check=True)
            wait_until(lambda: car.get("/readyz")[0] == 200, timeout=90, what="/readyz once there is room")
            wait_until(lambda: car.metric("epochfs_disk_full") == 0, timeout=90,
                       what="epochfs_disk_full back to 0")
            assert not _retrying(car)


@pytest.mark.long
@pytest.mark.fuse
@needs_fuse
def test_a_remote_unreachable_at_the_start_is_retried_not_restarted(tmp_path: Path, our_port: int) -> None:
    with running_sidecar(tmp_path, remote="s3://data", endpoint=SILENT_REMOTE, expect_ready=False) as car:
        wait_until(lambda: _retries(car) >= 3
                   or car.proc.poll() is not None, timeout=60, what="three retries of the sampler")
        assert car.proc.poll() is None, car.log_text()[-3000:]
        assert car.metric("epochfs_child_restarts_total", child="sampler") == 0
        assert _retrying(car).startswith("remote unreachable: "), _retrying(car)
        assert car.metric("epochfs_disk_full") == 0
        assert car.health()["children"]["sampler"]["restarts"] >= 3  # /healthz counts every start again


@needs_root
def test_restarts_are_shown_while_the_volume_refuses_their_save(tmp_path: Path) -> None:
    with small_volume(tmp_path / "vol", "16m") as vol:
        store = Store(vol / "cache", create=True)
        try:
            saves = StoreObservability(store)
            registry = saves.registry()
            saves._metrics.child_restarts.labels(child="sampler").inc()
            assert scraped(registry, "epochfs_child_restarts_total", child="sampler") == 1
            with sqlite3.connect(vol / "cache" / "index.sqlite") as db:  # a write must grow the log
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            filler = fill(vol, leave=0)
            saves._metrics.child_restarts.labels(child="sampler").inc(2)
            saves._metrics.child_retries.labels(child="sampler").inc(4)
            assert scraped(registry, "epochfs_child_restarts_total", child="sampler") == 3
            assert scraped(registry, "epochfs_child_retries_total", child="sampler") == 4
            assert json.loads(store.meta(Meta.SIDECAR_RESTARTS) or "{}")["sampler"] == 1  # not saved
            filler.unlink()
            assert scraped(registry, "epochfs_child_restarts_total", child="sampler") == 3
            assert json.loads(store.meta(Meta.SIDECAR_RESTARTS) or "{}")["sampler"] == 3
        finally:
            store.close()
