"""A clean stop after a crash restart logs no "write-ahead log deleted" ERROR (task C54d).

Before: after a ``kill -9`` of the sampler mid-relist and a restart, a SIGINT printed ``stopped
cleanly`` and then ``epochfs.store ERROR the cache index .../index.sqlite changed under this
process (write-ahead log deleted); 296 of its 296 frame(s) saved ... reopened`` (4 runs in 5).
strace showed who deleted the log: the listing process, at its exit, closing its connection last.
SQLite deletes the log when the connection that closes gets the EXCLUSIVE lock on the index
file, i.e. when no other process holds its SHARED one; the sampler's connection holds that lock
for as long as it is open, but the sampler had lost it at start: the quick start-up check
(store/checkup.py, ``quick``) read the file header through a descriptor of its own, and closing
any descriptor of a file drops all of the process's POSIX locks on it, SQLite's included. The
quick check runs on an index (with its log) of 8 MiB or more; a crash leaves a long log, hence
"after a crash restart".

Real processes, a real ``kill -9``, real SQLite files and locks: a writer process killed with
committed frames in the log; the restart's open and quick check in this process (``full_below=0``
takes the quick path at any size); a second process, as the listing process does, writes through
its own connection, closes it and exits. The sampler's connection must still have its log, see
both processes' rows, and log nothing at ERROR. A log really deleted under a live connection is
still an ERROR (the second test), and the quick check still finds a damaged header (the third:
the header is now read by SQLite on an ``immutable`` connection, whose close SQLite defers while
the process holds locks on the file).
"""

from __future__ import annotations

import hashlib
import logging
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from epochfs.sidecar.store import INDEX_NAME, CatalogRow, Store, checkup

WRITER = """
import sys
from epochfs.sidecar.store import CatalogRow, Store
store = Store(sys.argv[1], create=True)
store.add_catalog([CatalogRow(f"crashed/{i:05d}.bin", f"{i:032x}", 8, "etag", i) for i in range(500)])
print("committed", flush=True)
sys.stdin.read()  # held open, frames in the log, until the kill -9
"""

LISTER = """
import sys
from epochfs.sidecar.store import CatalogRow, Store
with Store(sys.argv[1], create=True) as store:
    store.add_catalog([CatalogRow(f"listed/{i:05d}.bin", f"{i:032x}", 8, "etag", 10_000 + i)
                       for i in range(300)])
"""


def _catalog_rows(store: Store) -> int:
    with store._handle.get().read() as db:
        return int(db.execute("SELECT count(*) FROM catalog").fetchone()[0])


def _crashed_writer(cache: Path) -> None:
    """A process that committed catalog rows (in the write-ahead log, not yet checkpointed) and
    was killed with SIGKILL: what a sampler's ``kill -9`` mid-listing leaves."""
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(cache)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "committed"
    finally:
        writer.kill()
        writer.wait(timeout=60)
    assert writer.returncode == -signal.SIGKILL
    wal = cache / f"{INDEX_NAME}-wal"
    assert wal.exists() and wal.stat().st_size > 0, "the crash left its log behind"


def test_a_process_closing_last_after_the_quick_start_check_leaves_the_samplers_log(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    _crashed_writer(cache)
    caplog.set_level(logging.INFO, logger="epochfs.store")
    wal = cache / f"{INDEX_NAME}-wal"
    with Store(cache, create=True) as store:  # the restart
        assert store.check_index(full_below=0) == "ok"
        assert "index: quick check ok" in caplog.text  # the path that lost the lock
        opened = store._handle.get()
        # The listing process: its own connection, a page of the catalog, its close, its exit.
        subprocess.run([sys.executable, "-c", LISTER, str(cache)], check=True, timeout=120)
        assert wal.exists(), "another process's close deleted the log under the sampler's connection"
        assert store._handle.get() is opened  # nothing changed under it, nothing to follow
        assert _catalog_rows(store) == 800  # the crashed run's rows and the lister's, one index
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []


def test_a_log_really_deleted_under_a_live_connection_is_still_an_error(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    caplog.set_level(logging.INFO, logger="epochfs.store")
    with Store(cache, create=True) as store:
        store.add_catalog([CatalogRow(f"k/{i}.bin", hashlib.md5(str(i).encode()).hexdigest(), 8, "e", i)
                           for i in range(50)])
        (cache / f"{INDEX_NAME}-wal").unlink()  # a cleaner, a hand
        assert _catalog_rows(store) == 50  # followed: saved by a checkpoint, reopened
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "(write-ahead log deleted)" in errors[0], errors


def test_the_quick_check_still_finds_a_damaged_header_on_disk(tmp_path: Path) -> None:
    """The header is now read by SQLite on an ``immutable`` connection of the check's own (page 1
    as the file holds it), not through a descriptor: garbage over the magic string is still
    damage, and a sound file passes."""
    cache = tmp_path / "cache"
    with Store(cache, create=True) as store:
        store.add_catalog([CatalogRow(f"k/{i}.bin", f"{i:032x}", 8, "e", i) for i in range(50)])
        ix = store._handle.get()
        ix.checkpoint()  # page 1 in the file itself
        assert checkup.quick(ix) == "ok"
        subprocess.run([sys.executable, "-c", "import sys; f = open(sys.argv[1], 'r+b'); "
                        "f.write(b'not SQLite at all'); f.close()", str(cache / INDEX_NAME)], check=True)
        assert checkup.quick(ix) == "bad header (file is not a database)"
