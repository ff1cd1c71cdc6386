"""An index found damaged during the sampler's start exits as one found damaged while it runs.

The start checks the index cheaply once it is large (:func:`epochfs.sidecar.store.checkup.quick`:
the header, the schema and the pages at both ends of every b-tree), so a page in the middle of a
b-tree may be damaged while that check passes; the start's next reads meet it: recovery's scan of
every sample (after the machine restarted under a running sampler) or the fetch order's resume
(the newest 256 admissions). Either must end ``epochfs sample`` with status 74
(``config.EXIT_INDEX``: the supervisor restarts it at once and counts no crash, and the marker
makes that start check the index in full and replace it) in the loop's one log line, and an index
that fails otherwise (not damage) with status 1 in that line, never a traceback.

Real parts: a cache built by the store's own code, a page of the real ``index.sqlite`` overwritten
(found with SQLite's ``dbstat``), and the real ``epochfs sample`` process.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fuse_helpers import admit, make_objects, open_store
from sampler_helpers import EPOCHFS, start_sampler
from store_helpers import sid_of

from epochfs.sidecar import keyorder
from epochfs.sidecar.config import EXIT_INDEX
from epochfs.sidecar.sampler.command import index_failed
from epochfs.sidecar.store import INDEX_NAME, CatalogRow, Meta, Store, checkmark
from epochfs.sidecar.store.catalog import RESUME_RECENT
from epochfs.sidecar.store.checkup import START_FULL_BYTES

SEED = 0
SAMPLES = 300
"""Admitted samples: a dozen leaf pages of the samples table, more than RESUME_RECENT rows."""
CATALOG_PAD = 32_000
"""Catalog keys beside them: an index past START_FULL_BYTES (the start's cheap check, not the full one)."""
FAILED_LINE = "ERROR the cache index failed: "


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stopped cache of a file:// remote (its own folder beside it, ``data``): SAMPLES samples
    admitted after a recovery, a complete catalog, a clean stop. Built once; each test copies it."""
    base = tmp_path_factory.mktemp("built")
    objects = make_objects(SAMPLES, 64)
    for key, body in objects.items():
        (base / "data" / key).parent.mkdir(parents=True, exist_ok=True)
        (base / "data" / key).write_bytes(body)
    keys = list(objects) + [f"train/older/{i:07d}-{sid_of(str(i))}.bin" for i in range(CATALOG_PAD)]
    rows = [CatalogRow(k, sid_of(k), 64, "v1", keyorder.rank(SEED, k)) for k in keys]
    with open_store(base / "cache") as store:
        store.recover(integrity="ok")  # as the sampler: the journal exists, a clean stop empties it
        for i in range(0, len(rows), 5000):
            store.add_catalog(rows[i:i + 5000])
        store.finalize_catalog()
        admit(store, objects)
    assert (base / "cache" / INDEX_NAME).stat().st_size >= START_FULL_BYTES
    return base


@pytest.fixture
def cache(built: Path, tmp_path: Path) -> Iterator[Path]:
    shutil.copytree(built / "data", tmp_path / "data")
    shutil.copytree(built / "cache", tmp_path / "cache")
    yield tmp_path / "cache"


def sample_leaves(cache: Path) -> list[tuple[int, int]]:
    """(page, rows) of the samples table's leaf pages in b-tree order (the oldest admissions
    first)."""
    db = sqlite3.connect(cache / INDEX_NAME)
    try:
        return [(int(r[0]), int(r[1])) for r in db.execute(
            "SELECT pageno, ncell FROM dbstat WHERE name='samples' AND pagetype='leaf' ORDER BY path")]
    finally:
        db.close()


def zero_page(cache: Path, page: int) -> None:
    """Zeros over one page of the (stopped, checkpointed) index: a write the volume lost."""
    db = sqlite3.connect(cache / INDEX_NAME)
    try:
        size = int(db.execute("PRAGMA page_size").fetchone()[0])
    finally:
        db.close()
    with open(cache / INDEX_NAME, "r+b") as f:
        f.seek((page - 1) * size)
        f.write(bytes(size))


def machine_restarted_under_the_sampler(cache: Path) -> None:
    """The boot id a sampler records while it runs, of another boot: the start's recovery then
    checks every sample against its file (recovery.py, "the machine restarted under...")."""
    with Store(cache) as store:
        store.set_meta(Meta.WRITER_RUNNING, "another-boot")


def sample(cache: Path) -> tuple[int, str]:
    """Run ``epochfs sample`` on ``cache`` until it exits: (status, its log)."""
    remote = (cache.parent / "data").as_uri()
    done = subprocess.run([EPOCHFS, "sample", "--remote", remote, "--cache", str(cache),
                           "--seed", str(SEED), "--capacity", "1Gi"],
                          capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


def assert_damage_exit(status: int, log: str, cache: Path) -> None:
    assert status == EXIT_INDEX, f"exit {status}:\n{log[-3000:]}"
    assert "quick check ok" in log, log  # the start's check passed: the damage was met after it
    failed = [line for line in log.splitlines() if FAILED_LINE in line]
    assert len(failed) == 1 and "malformed" in failed[0], log
    assert failed[0].endswith("; exiting (the next start repairs it)"), failed
    assert "Traceback" not in log, log
    assert checkmark.reason(cache) is not None, "the next start checks the index in full"


def test_damage_met_by_the_fetch_orders_resume_exits_74_and_the_next_start_replaces_it(
        cache: Path) -> None:
    leaves = sample_leaves(cache)
    # Not the last leaf (the cheap check reads it) but one the newest RESUME_RECENT admissions reach.
    assert len(leaves) >= 6 and sum(rows for _, rows in leaves[-2:]) < RESUME_RECENT, leaves
    zero_page(cache, leaves[-3][0])

    status, log = sample(cache)
    assert_damage_exit(status, log, cache)
    assert "recovery: " in log, "recovery passed: the fetch order's resume met the damage"

    # The next start runs the full check, replaces the index and samples on: no crash loop.
    sp = start_sampler(cache, (cache.parent / "data").as_uri(), "--seed", str(SEED), "--capacity", "1Gi")
    try:
        assert "and replaced by a fresh one" in sp.log_text(), sp.log_text()
    finally:
        status = sp.stop()
    assert status == 0, sp.log_text()[-3000:]


def test_damage_met_by_recovery_exits_74(cache: Path) -> None:
    machine_restarted_under_the_sampler(cache)
    leaves = sample_leaves(cache)
    zero_page(cache, leaves[len(leaves) // 2][0])

    status, log = sample(cache)
    assert_damage_exit(status, log, cache)
    assert "start-up check of every object file" in log, "recovery met the damage"
    assert "recovery: " not in log, log


def test_an_index_that_fails_otherwise_at_start_exits_1_in_one_line(cache: Path) -> None:
    """Not damage (SQLite reads every page it asks for): a table recovery reads is missing."""
    machine_restarted_under_the_sampler(cache)
    db = sqlite3.connect(cache / INDEX_NAME)
    try:
        db.execute("DROP TABLE repairs")
    finally:
        db.close()

    status, log = sample(cache)
    assert status == 1, f"exit {status}:\n{log[-3000:]}"
    failed = [line for line in log.splitlines() if FAILED_LINE in line]
    assert len(failed) == 1 and "no such table: repairs" in failed[0], log
    assert "Traceback" not in log, log
    assert checkmark.reason(cache) is None, "no damage: no full check asked for"


def test_a_corruption_met_where_nothing_marked_it_is_marked_for_the_next_starts_full_check(
        tmp_path: Path) -> None:
    """Exit 74 promises that the next start checks the index in full and replaces it, which that
    start does only where the marker asks. A corruption error from a statement that does not mark
    (a checkpoint, the integrity check) must leave the marker, or the next start's cheap check
    passes again and the sampler exits 74 again."""
    cache = tmp_path / "cache"
    cache.mkdir()
    assert checkmark.reason(cache) is None
    assert index_failed(sqlite3.DatabaseError("database disk image is malformed"), cache) == EXIT_INDEX
    assert checkmark.reason(cache) is not None
    # Not damage: exit 1, nothing marked.
    other = tmp_path / "other"
    other.mkdir()
    assert index_failed(sqlite3.OperationalError("disk I/O error"), other) == 1
    assert checkmark.reason(other) is None
