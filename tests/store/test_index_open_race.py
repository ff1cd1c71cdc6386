"""An index deleted while another process opens it stays deleted, so the running sampler sees the
deletion (and exits for its restart to rebuild the index from the members files).

``make test`` once failed ``test_an_index_deleted_under_the_running_sampler_is_rebuilt_at_its_restart``
(exit 2, not 1): the listing process, starting, opened the index between its look for the file
and SQLite's open, which made an empty ``index.sqlite`` in the deleted one's place. The sampler
then saw an index replaced by one it could not open, logged so at every use, and went on with the
deleted one; the listing process, refusing the empty file, failed five starts in a row, which
ended the sampler as a broken install. The race is made here at its seam: the look sees the file,
the file is deleted before the connection opens it.

Real SQLite files, a real store made by admissions.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from fuse_helpers import admit, make_objects, open_store

from epochfs.sidecar.store import INDEX_NAME, Store
from epochfs.sidecar.store import index as index_module
from epochfs.sidecar.store.index import BlankIndex


def _deleted_after_the_look(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """The next look for ``path`` sees it; the file is deleted before anything opens it."""
    real = os.path.lexists

    def look(p: str | os.PathLike[str]) -> bool:
        there = real(p)
        if there and Path(p) == path:
            path.unlink()
        return there

    monkeypatch.setattr(index_module.os.path, "lexists", look)


def test_an_index_deleted_between_the_look_and_the_open_is_missing_not_made_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    index = cache / INDEX_NAME
    with open_store(cache) as sampler:  # the running sampler's connection
        admit(sampler, make_objects(3, 10))
        _deleted_after_the_look(monkeypatch, index)
        # A second process's open (the listing process's, a read-side opener of the store):
        with pytest.raises(BlankIndex, match="the index is missing, but the cache holds"):
            Store(cache)
        monkeypatch.undo()
        assert not os.path.lexists(index), "the open made a file in the deleted index's place"
        assert sampler.index_lost(), "the running sampler must see the deletion (and exit)"


def test_a_replaced_index_that_cannot_be_reopened_is_logged_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    index = cache / INDEX_NAME
    with open_store(cache) as sampler:
        admit(sampler, make_objects(3, 10))
        empty = cache / "empty"
        empty.write_bytes(b"")
        os.replace(empty, index)  # an empty file put in the index's place (by hand)
        with caplog.at_level(logging.ERROR, logger="epochfs.store"):
            for _ in range(5):  # the sampler's loop asks before every use
                assert not sampler.index_lost()
        said = [r.getMessage() for r in caplog.records if "cannot be reopened" in r.getMessage()]
        assert len(said) == 1, said
        assert "the index is an empty file" in said[0], said
