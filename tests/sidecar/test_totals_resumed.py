"""The supervisor's own counters come back after its restart at or above what a scrape showed.

Before: the totals (client reports, served opens) were saved every 2 s only, so a supervisor
killed with -9 right after a scrape resumed below the value that scrape showed (Prometheus reads
the drop as a reset: ``increase()`` 93,000 for 22,500 counted); and the children's restarts were
not saved at all (``epochfs_child_restarts_total`` back to 0 with every container restart, while
docs/metrics.md said it does not reset). Now ``/metrics`` saves what changed before it answers,
and the restarts are saved and resumed by child.

The real ``epochfs sidecar`` against moto's S3 server, real HTTP scrapes and reports, a real
kill -9 of the supervisor, a second sidecar on the same cache.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import urllib.request
from pathlib import Path

import pytest
from common import S3Server, put_objects, random_objects, wait_until
from observability_helpers import StoreObservability, scraped
from sidecar_helpers import Sidecar, cleanup_mounts, running_sidecar

from epochfs.fuse.mounting import find_mount, is_dead
from epochfs.sidecar.store import Meta, Store

needs_fuse = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                                reason="needs root and FUSE")

BUCKET = "data"
EXTRA = ("--min-samples", "1")


def _report(car: Sidecar, samples: int) -> None:
    body = json.dumps({"samples": samples, "bytes": samples * 1000, "wait_seconds": 0.5}).encode()
    req = urllib.request.Request(car.base + "/v1/client-report", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status in (200, 202, 204)


def _gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except FileNotFoundError:
        return True


def _kill_supervisor(car: Sidecar) -> None:
    """kill -9 of the supervisor at once (no save on the way out); wait for its children to go
    (PR_SET_PDEATHSIG) and clear the mounts they leave, so another sidecar can take the cache."""
    pids = [p for p in (car.child_pid("sampler"), car.child_pid("fuse")) if p is not None]
    car.proc.kill()
    car.proc.wait()
    wait_until(lambda: all(_gone(p) for p in pids), timeout=15, what="children gone after kill -9")
    wait_until(lambda: find_mount(car.mount) is None or is_dead(car.mount), timeout=10,
               what="no live mount left")
    cleanup_mounts(car.mount, car.cache / "objects-ro")


@pytest.mark.fuse
@needs_fuse
def test_a_value_a_scrape_showed_survives_kill_9_of_the_supervisor(s3: S3Server, tmp_path: Path) -> None:
    put_objects(s3, BUCKET, random_objects(5, 4096))
    shown: dict[str, float] = {}
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint, extra=EXTRA,
                         expect_exit=-signal.SIGKILL) as car:
        for samples in (100, 250, 400):
            _report(car, samples)
        # Scrape until the reports show, then kill -9 right after that scrape: no periodic
        # save (every 2 s) comes between, but for the one the scrape made itself.
        while (value := car.metric("epochfs_client_samples_total")) != 750:
            assert value is None or value < 750, value
        shown = {name: car.metric(name) or 0.0 for name in
                 ("epochfs_client_samples_total", "epochfs_client_bytes_total",
                  "epochfs_client_wait_seconds_total")}
        _kill_supervisor(car)
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint, extra=EXTRA) as again:
        after = {name: again.metric(name) or 0.0 for name in shown}
    assert shown["epochfs_client_samples_total"] == 750
    for name, value in shown.items():
        assert after[name] >= value, (name, after[name], value)


@pytest.mark.fuse
@needs_fuse
def test_child_restarts_do_not_reset_with_the_supervisor(s3: S3Server, tmp_path: Path) -> None:
    put_objects(s3, BUCKET, random_objects(5, 4096))
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint, extra=EXTRA) as car:
        old = car.child_pid("sampler")
        assert old is not None
        os.kill(old, signal.SIGKILL)
        wait_until(lambda: car.metric("epochfs_child_restarts_total", child="sampler") == 1,
                   timeout=30, what="the sampler's restart counted")
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint, extra=EXTRA) as again:
        assert again.metric("epochfs_child_restarts_total", child="sampler") == 1
        assert again.metric("epochfs_child_restarts_total", child="fuse") == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")
def test_a_value_that_cannot_be_saved_is_not_shown_until_it_is(tmp_path: Path) -> None:
    """A full volume: the scrape shows the saved value (what a restart would resume), then the
    new one once a save succeeds."""
    from inprocess import fill, small_volume

    with small_volume(tmp_path / "vol", "16m") as vol:
        store = Store(vol / "cache", create=True)
        try:
            saves = StoreObservability(store)
            registry = saves.registry()
            saves._metrics.add_client_report(samples=10, nbytes=100, wait_seconds=1.0)
            assert scraped(registry, "epochfs_client_samples_total") == 10
            with sqlite3.connect(vol / "cache" / "index.sqlite") as db:  # a write must grow the log
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            filler = fill(vol, leave=0)
            saves._metrics.add_client_report(samples=5, nbytes=50, wait_seconds=1.0)
            assert scraped(registry, "epochfs_client_samples_total") == 10, "shown above the save"
            filler.unlink()
            assert scraped(registry, "epochfs_client_samples_total") == 15
            assert json.loads(store.meta(Meta.SIDECAR_TOTALS) or "{}")["client_samples_total"] == 15
        finally:
            store.close()


@pytest.mark.fuse
@needs_fuse
def test_a_scrape_answers_while_another_writer_holds_the_index(s3: S3Server, tmp_path: Path) -> None:
    """A scrape's save of the totals waits for the index's write lock; another writer holding it
    (a long cut; here a connection of the test's, 12 s) made every scrape whose totals changed
    wait past the endpoints' 10 s and fail with a 503 and no value. Now the scrape answers (while
    the lock is still held) with what the store held, and the new value once the save went through."""
    put_objects(s3, BUCKET, random_objects(5, 4096))
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint, extra=EXTRA) as car:
        _report(car, 100)
        wait_until(lambda: car.metric("epochfs_client_samples_total") == 100, what="the first report shown")
        _report(car, 50)  # changed since the last save: the next scrape saves before it answers
        holder = sqlite3.connect(car.cache / "index.sqlite", isolation_level=None, timeout=30)
        try:
            holder.execute("BEGIN IMMEDIATE")
            with urllib.request.urlopen(car.base + "/metrics", timeout=30) as r:
                status, text = r.status, r.read().decode()
            holder.execute("COMMIT")  # released only after the scrape answered
        finally:
            holder.close()
        shown = [float(line.split()[-1]) for line in text.splitlines()
                 if line.startswith("epochfs_client_samples_total ")]
        assert status == 200, status
        assert shown == [100.0], shown  # what the store held: never more than is saved
        wait_until(lambda: car.metric("epochfs_client_samples_total") == 150,
                   what="the save once the lock went")
