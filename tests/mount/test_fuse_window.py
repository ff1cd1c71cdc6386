"""A restarted FUSE server reports, and serves with, the current in-use window (issue 20, item 5).

Under ``epochfs sidecar`` the FUSE server and the sampler start together, and the server read the
window from the index before the new sampler recorded its ``--in-use-seconds``: a sidecar
restarted with another window logged the old one ("in-use window 60s ... at least 39s") and
served with its timeout and read debounce for its whole life, while retirement used the new one.
Here the index holds the previous run's window when the server starts, then the sampler's start
records another one, as it does beside a running server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import admit, files_under, make_objects, mounted, open_store, stop

from epochfs.fuse.inuse import cache_timeout, describe, guaranteed_pause, read_debounce
from epochfs.sidecar.store import Policy

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]


def window_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if "in-use window" in line]


@pytest.mark.parametrize("api", ["lowlevel", "highlevel"])
def test_a_restarted_server_follows_the_window_the_sampler_records(tmp_path: Path, api: str) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache, keep_epochs=1, in_use_seconds=60.0)  # the previous run's window
    objects = make_objects(12, 700, seed=20)
    admit(store, objects)
    assert store.cut(0) == 0
    with mounted(cache, mnt, args=("--fuse-api", api)) as m:
        assert files_under(mnt / "epoch-0") == objects
        wait_until(lambda: "entry/attr timeout 20s" in m.log_text(), what="the server's start lines")
        assert [describe(60.0) in line for line in window_lines(m.log_text())] == [True]

        # The restarted sidecar's sampler starts: recovery, then configure() with its window.
        store.configure(Policy(capacity=1 << 30, keep_epochs=1, in_use_seconds=1800.0))
        wait_until(lambda: len(window_lines(m.log_text())) == 2, what="the server reports the new window")
        line = window_lines(m.log_text())[1]
        assert describe(1800.0) in line, line
        assert "at least 1190s after the last read" in line and "it was 60s" in line, line
        assert f"timeout now {cache_timeout(1800.0):.0f}s" in line, line
        assert (cache_timeout(1800.0), read_debounce(1800.0), guaranteed_pause(1800.0)) == (600, 10, 1190)

        # It serves on with the new timeout (the high-level API's in libfuse's own config).
        assert files_under(mnt / "epoch-0") == objects
        assert (mnt / "epoch-1").exists() and files_under(mnt / "epoch-1") == objects
        assert stop(m) == 0
        assert len(window_lines(m.log_text())) == 2, "an unchanged window is not logged again"
        assert "Traceback" not in m.log_text()
    store.close()
