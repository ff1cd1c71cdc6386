"""A folder among the object files (``objects/<fan>/<name>/``: another program's, or a dataset put
in the cache) is none of the store's: recovery and the object scan pass it over and leave it,
with one warning, where a start used to end in a traceback (``IsADirectoryError`` from the
orphans' removal) at every try. Real store, real files.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fuse_helpers import admit, make_objects, open_store

from epochfs.sidecar.store import INDEX_NAME, OBJECTS_DIR, Store


def test_a_folder_among_the_object_files_is_left_and_said(tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    with open_store(cache) as store:
        admit(store, make_objects(3, 10))
    stray = cache / OBJECTS_DIR / "ab" / "stray"
    stray.mkdir(parents=True)
    (stray / "keep.txt").write_text("not the cache's\n")
    for suffix in ("", "-wal", "-shm"):  # deleted: the next writer's open rebuilds it, then the
        (cache / f"{INDEX_NAME}{suffix}").unlink(missing_ok=True)  # recovery checks every file
    with caplog.at_level(logging.WARNING, logger="epochfs.store"), Store(cache, create=True) as again:
        report = again.recover()
    assert report.orphans_removed == 3, report  # the admitted objects: no epoch was cut, no index row kept
    assert (stray / "keep.txt").read_text() == "not the cache's\n"
    said = [r.getMessage() for r in caplog.records if "none of the store's" in r.getMessage()]
    assert len(said) == 1 and str(stray) in said[0], said
