"""A sampler whose index was deleted under it says so, whichever notices first.

Why: the loop looks for a deleted index about once a second; a write that comes first fails on the
unlinked file with SQLite's "disk I/O error", and the sampler exited saying "the cache index failed:
disk I/O error", with nothing of the deletion (seen under load in
``tests/store/test_missing_index_r53.py``). Its exit line now names the deletion either way, with
the same exit status (1: the supervisor's restart rebuilds the index).
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from epochfs.sidecar.sampler.command import index_failed
from epochfs.sidecar.sampler.loop import INDEX_DELETED
from epochfs.sidecar.store import INDEX_NAME, Store


def test_a_write_that_meets_the_deleted_index_names_the_deletion(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    Store(cache, create=True).close()
    (cache / INDEX_NAME).unlink()
    with caplog.at_level(logging.ERROR, logger="epochfs.sampler"):
        rc = index_failed(sqlite3.OperationalError("disk I/O error"), cache)
    assert rc == 1
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith(INDEX_DELETED) and "disk I/O error" in line, line


def test_an_index_that_is_there_fails_in_its_own_words(tmp_path: Path,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    Store(cache, create=True).close()
    with caplog.at_level(logging.ERROR, logger="epochfs.sampler"):
        index_failed(sqlite3.OperationalError("disk I/O error"), cache)
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("the cache index failed: disk I/O error"), line
