"""``/healthz`` while the cache's index is damaged: the sidecar repairs it by itself in seconds.

A garbled ``index.sqlite`` is found by the sampler (or any opener) and replaced by one rebuilt from
the epochs' members files within seconds (:mod:`epochfs.sidecar.store.reset`). A failed liveness
probe restarts the pod, so no answer of ``/healthz`` from the damage until the index is replaced
(its one log line) and the sampler runs again may be other than 200.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Any, cast

import pytest
from common import S3Server, put_objects, random_objects, wait_until
from sidecar_helpers import Sidecar, running_sidecar

from epochfs.sidecar.store.index import INDEX_NAME
from epochfs.sidecar.supervisor import HealthChecks

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]

BUCKET = "data"
RESET_LINE = "and replaced by a fresh one"


class HealthPoller:
    """Polls ``/healthz`` on a thread until stopped, keeping every answer's code and body."""

    def __init__(self, car: Sidecar) -> None:
        self.car = car
        self.answers: list[tuple[int, str]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="healthz", daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            code, body = self.car.get("/healthz")
            self.answers.append((code, body.decode(errors="replace")))
            self.stop.wait(0.05)  # the poll's pace, not a synchronization

    def __enter__(self) -> HealthPoller:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


def garble_leaves(cache: Path, pages: int = 7) -> list[int]:
    """Garbage over up to ``pages`` leaf pages of the samples' table (the soak's damage: each cut
    reads it), in place beside the running sidecar, where the sampler is sure to read it. Returns
    the pages.

    SQLite reads a page from the write-ahead log when the log holds it, and a connection keeps the
    pages it read until another connection commits. Garbage under either is never read: the
    sampler changes the page from its clean copy and its next checkpoint writes it over the
    garbage, so the damage is mended unseen and no replacement comes (what a cut of the sampler
    between a checkpoint and the garbage does, most often under load). So the garbage goes in
    with the write lock held and the log empty (checkpointed, no writer since), and this
    connection's commit then makes every other connection drop the pages it holds and read the
    file's."""
    index = cache / INDEX_NAME
    wal = index.with_name(index.name + "-wal")
    db = sqlite3.connect(index, timeout=10, isolation_level=None)

    def locked_with_empty_log() -> bool:
        busy = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        db.execute("BEGIN IMMEDIATE")
        if busy == 0 and (not wal.exists() or wal.stat().st_size == 0):
            return True
        db.execute("ROLLBACK")  # a reader held the log, or a writer came first: again
        return False

    try:
        wait_until(locked_with_empty_log, timeout=30, what="the index's write lock with its log empty")
        leaves = [int(r[0]) for r in db.execute(
            "SELECT pageno FROM dbstat WHERE pagetype='leaf' AND name='samples' ORDER BY pageno")]
        size = int(db.execute("PRAGMA page_size").fetchone()[0])
        hit = leaves[max(0, len(leaves) // 2 - pages // 2):][:pages]
        with open(index, "r+b") as f:
            for page in hit:
                f.seek((page - 1) * size)
                f.write(os.urandom(size))
        # A commit for the others to see: the header's user_version, which epochfs does not use.
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        db.execute(f"PRAGMA user_version={version + 1}")
        db.execute("COMMIT")
    finally:
        db.close()
    return hit


def members_of_live_epochs(car: Sidecar) -> bool:
    """Every live epoch has its members file (what a rebuild restores the epochs from)."""
    epochs = car.mount / ".epochfs"
    live = sorted(p.name for p in epochs.glob("epoch-*.manifest")) if epochs.is_dir() else []
    members = car.cache / "epochs"
    return bool(live) and all((members / (name.removesuffix(".manifest") + ".members")).exists()
                              for name in live)


def running(car: Sidecar) -> bool:
    """The sampler cut an epoch since the last reset: it is past its start (a damage during the
    start is met before the run, not the case here) and in its loop."""
    text = car.log_text()
    return "INFO cut epoch" in text[text.rfind(RESET_LINE) + 1:]


def sampler_of(car: Sidecar) -> dict[str, Any]:
    return cast(dict[str, Any], car.health().get("children", {}).get("sampler", {}))


@pytest.mark.long
def test_healthz_stays_200_while_garbled_indexes_are_replaced(s3: S3Server, tmp_path: Path) -> None:
    """UNHEALTHY_CRASHES damages in a row, each met by the running sampler (which exits on it) and
    mended by its next start within seconds: were each exit a crash, the last would fail /healthz
    for the whole backoff after it (8 s), and the crash count must stay 0."""
    # Over twice the capacity, fetched at a bounded rate: the sampler keeps admitting, evicting and
    # cutting an epoch a second, so it meets each damage at once.
    put_objects(s3, BUCKET, random_objects(600, 8 * 1024))
    extra = ("--capacity", "2Mi", "--min-samples", "10", "--cut-interval", "1", "--keep-epochs", "2",
             "--in-use-seconds", "2", "--concurrency", "4", "--max-rate", "1Mi", "--scrub-rate", "0")
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint, extra=extra) as car:
        with HealthPoller(car) as poller:
            for damage in range(HealthChecks.UNHEALTHY_CRASHES):
                wait_until(lambda: running(car) and members_of_live_epochs(car), timeout=60,
                           what="the sampler's loop running, the members files written")
                pid = sampler_of(car).get("pid")
                garble_leaves(car.cache)
                wait_until(lambda n=damage: car.log_text().count(RESET_LINE) > n, timeout=60,
                           what=f"index {damage} replaced")
                wait_until(lambda p=pid: sampler_of(car).get("alive") is True and sampler_of(car)["pid"] != p,
                           timeout=60, what=f"the sampler running after damage {damage}")
            polled = len(poller.answers)
            wait_until(lambda: len(poller.answers) >= polled + 3, timeout=30, what="/healthz after them")
        failures = [(code, body) for code, body in poller.answers if code != 200]
        assert not failures, (f"{len(failures)} of {len(poller.answers)} /healthz answers not 200: "
                              f"{failures[:3]}")
        assert sampler_of(car)["crashes"] == 0, car.health()

