"""A take-out cut short between its commit and its move (``epochfs verify`` stopped by SIGTERM or
kill -9) left ``quarantine/.<sid>.<pid>.tmp``, a second link of the damaged file, that no later run
removed: after the repair, the only copy of the damaged bytes, on the volume outside the budget and
absent from ``quarantine.log``. Start-up recovery now finishes it as ``quarantine/<sid>`` with its
line in the log; a live process's link is left alone. A real store, real files."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from fuse_helpers import open_store


def test_recovery_finishes_a_dead_take_outs_hidden_link(tmp_path: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    store = open_store(cache)
    store.close()
    folder = cache / "quarantine"
    folder.mkdir()
    dead = folder / ".ab12.999999999.tmp"  # no such pid
    live = folder / ".cd34.1.tmp"  # pid 1: alive
    taken = folder / ".ef56.999999999.tmp"
    dead.write_bytes(b"damaged")
    live.write_bytes(b"in flight")
    taken.write_bytes(b"again")
    (folder / "ef56").write_bytes(b"kept already")
    with caplog.at_level(logging.WARNING, logger="epochfs.store"), open_store(cache) as store:
        store.recover()
    assert (folder / "ab12").read_bytes() == b"damaged" and not dead.exists()
    assert live.exists()  # a live process's, left alone
    assert not taken.exists() and (folder / "ef56").read_bytes() == b"kept already"
    notes = [json.loads(line) for line in (folder / "quarantine.log").read_text().splitlines()]
    assert [n["sid"] for n in notes] == ["ab12"]
    assert "2 damaged file(s) a cut-short take-out left in quarantine/" in caplog.text
