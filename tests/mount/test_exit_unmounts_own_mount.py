"""Real mounts: a server's exit removes only the mount it made.

A server that does not answer (SIGSTOP, a wedged process) is taken for dead by the next server at
its mount point, which detaches the hung mount and mounts its own there, under the same name
(``epochfs:<cache>``). When the old server then goes on and exits, its cleanup found a FUSE mount
at its path and detached it: the new server's, whose loop then ended ("unmounted from outside"),
and no view was left at all; its release of the cache's read-only bind skipped views at its own
mount point, so the new view's files would have lost their target too.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from fuse_helpers import admit, files_under, freeze, make_objects, mounted, open_store

from epochfs.fuse.mounting import find_mount

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]


@pytest.mark.long
@pytest.mark.parametrize("stop", ["term", "cont"])
@pytest.mark.parametrize("api", ["lowlevel", "highlevel"])
def test_old_server_exit_leaves_the_new_servers_mount(tmp_path: Path, api: str, stop: str) -> None:
    """``stop``: the old server is sent SIGTERM before SIGCONT, or only continued (its loop then
    ends by itself: its mount is gone)."""
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache)
    objects = make_objects(5, 1024, seed=1)
    admit(store, objects)
    store.cut(0)
    store.close()
    args = ("--fuse-api", api)
    with mounted(cache, mnt, args=args) as old:
        freeze(old.proc)
        hung = find_mount(mnt)
        assert hung is not None
        # The new server finds the stopped one's mount silent, detaches it and mounts its own.
        with mounted(cache, mnt, args=args, timeout=30, over=hung) as new:
            device = os.stat(mnt).st_dev  # the new mount's (a stat of the hung one would wait)
            if stop == "term":
                old.proc.send_signal(signal.SIGTERM)
            old.proc.send_signal(signal.SIGCONT)
            assert old.proc.wait(timeout=30) == 0, old.log_text()[-3000:]
            # The old server's exit is complete: whatever it unmounted is gone from the table now.
            left = find_mount(mnt)
            assert left is not None and left.fstype.startswith("fuse"), old.log_text()[-3000:]
            assert os.stat(mnt).st_dev == device
            assert "epoch-0" in os.listdir(mnt)
            # Its files read through the cache's read-only bind, which the old server's exit must
            # leave mounted for the view now at its mount point.
            assert files_under(mnt / "epoch-0") == objects
            assert new.proc.poll() is None, new.log_text()[-3000:]
