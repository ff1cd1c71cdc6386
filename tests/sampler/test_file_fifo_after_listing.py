"""A ``file://`` key replaced by a fifo after the listing is skipped with a reason; nothing waits on it.

Opened as a plain file, a fifo blocks its reader until a writer comes: the download slot was held
for as long as the sidecar ran, and with ``--concurrency 1`` nothing else was ever fetched, with
nothing logged (review O, defect 3). The remote now opens without blocking and refuses what is not
a regular file (``Changed``): a counted, logged skip, as for any object changed since the listing.

The sampler's loop in-process (tests/inprocess.py) over a real folder and real fifos, made between
the listing and the first download; one download at a time.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import wait_until
from inprocess import sampling, settings_for
from store_helpers import sample_checksums

from epochfs.sidecar.remote.file import FileRemote

REPLACED = ("f03.bin", "f07.bin")


@pytest.fixture
def fifos() -> Iterator[list[Path]]:
    """Fifos a test makes; a reader left blocked on one is let go at the end, so that a test of a
    blocking open fails on its assertion instead of hanging in the sampler's stop."""
    made: list[Path] = []
    yield made
    for path in made:
        with contextlib.suppress(OSError):  # no reader waits (ENXIO), or gone
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def test_a_fifo_in_place_of_a_listed_file_is_skipped_and_the_rest_fetched(
        tmp_path: Path, fifos: list[Path], caplog: pytest.LogCaptureFixture) -> None:
    data = tmp_path / "data"
    data.mkdir()
    objects = {f"f{i:02d}.bin": os.urandom(10_000) for i in range(12)}
    for key, body in objects.items():
        (data / key).write_bytes(body)

    def replace_with_fifos() -> None:
        for key in REPLACED:
            (data / key).unlink()
            os.mkfifo(data / key)
            fifos.append(data / key)

    kept = {k: v for k, v in objects.items() if k not in REPLACED}
    settings = settings_for(tmp_path / "cache", "--concurrency", "1", "--retries", "3")
    with caplog.at_level(logging.WARNING, logger="epochfs.sampler"), \
            sampling(tmp_path / "cache", FileRemote(url=data.as_uri()), settings,
                     after_listing=replace_with_fifos) as (store, _):
        wait_until(lambda: store.stats().samples + store.stats().skipped_total == len(objects),
                   timeout=15, what="every key fetched or skipped")
        stats = store.stats()
        got = {key: path.read_bytes() for key, _, path in sample_checksums(store)}
    assert got == kept
    assert stats.skipped_total == len(REPLACED)
    for key in REPLACED:
        said = [r.getMessage() for r in caplog.records if f"skipping '{key}'" in r.getMessage()]
        assert len(said) == 1, said
        assert "Changed" in said[0] and "a fifo now, not a regular file" in said[0], said
