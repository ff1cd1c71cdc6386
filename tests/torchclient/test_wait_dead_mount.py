"""Waiting on a dead FUSE mount says the mount does not answer, not that it is no mount.

A FUSE mount whose server died answers ENOTCONN to everything (``ls``: "Transport endpoint is not
connected"): no epochs to list, no ``.epochfs/`` to find. The waiting line took that for a folder
that is not the mount ("no epoch folders yet, no .epochfs/ here either: not an epochfs mount
(yet)") for the whole wait, though the sidecar mounts a new server within seconds. A real
``epochfs mount`` over a cache filled through the Store API, its server killed with SIGKILL: the
mount stays, dead, until the context lazily unmounts it.
"""

from __future__ import annotations

import errno
import os
import signal
from pathlib import Path

import pytest
from fuse_helpers import admit, errno_of, make_objects, mounted, open_store

from epochfs.torchclient.describe import describe_root
from epochfs.torchclient.waiting import wait_for_epoch

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]

DEAD = ("the mount does not answer (ENOTCONN: its FUSE server died or is restarting; under "
        "`epochfs sidecar` it is mounted again)")
NOT_A_MOUNT = "not an epochfs mount (yet)"


@pytest.mark.parametrize("looked_before", [False, True], ids=["cold", "cached"])
def test_the_wait_on_a_dead_mount_says_it_does_not_answer_and_keeps_waiting(
        tmp_path: Path, looked_before: bool) -> None:
    """``cold``: nothing under the mount was looked up before the server died, so ``.epochfs/``
    answers ENOTCONN too (the reviewer's case). ``cached``: the root and ``.epochfs/`` were looked up
    while it lived, and the kernel answers their ``stat`` from its cache; only the listing fails."""
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    with open_store(cache) as store:
        admit(store, make_objects(2, 100))
        store.cut()
    with mounted(cache, mnt) as m:
        if looked_before:
            assert describe_root(mnt).startswith("epochs 0 present"), describe_root(mnt)
        m.proc.send_signal(signal.SIGKILL)  # the server dies; the mount stays, answering ENOTCONN
        m.proc.wait()
        assert errno_of(lambda: os.listdir(mnt)) == errno.ENOTCONN, "the mount is dead"
        said = describe_root(mnt)
        assert said == DEAD and NOT_A_MOUNT not in said, said
        lines: list[str] = []
        # A root being replaced is waited on (never refused at once): only the wait's bound ends it.
        with pytest.raises(TimeoutError) as waited:
            wait_for_epoch(mnt, 1, timeout=0.3, progress=lines.append, sidecar_url=None)
        assert DEAD in str(waited.value) and NOT_A_MOUNT not in str(waited.value), str(waited.value)
        assert lines and DEAD in lines[0] and NOT_A_MOUNT not in lines[0], lines


def test_cut_requests_on_a_dead_mount_blame_the_mount_not_the_port(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """With the mount dead, its status.json (which names the sidecar's port) cannot be read, and
    a failed cut request's advice was to set EPOCHFS_REPORT_URL (an exploratory run): the port
    was never the mistake."""
    from common import free_port

    from epochfs.torchclient.cutask import URL_DEFAULT, CutAsker

    monkeypatch.delenv("EPOCHFS_REPORT_URL", raising=False)
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    with open_store(cache) as store:
        admit(store, make_objects(2, 100))
        store.cut()
    with mounted(cache, mnt) as m:
        m.proc.send_signal(signal.SIGKILL)
        m.proc.wait()
        asker = CutAsker(f"http://127.0.0.1:{free_port()}", source=URL_DEFAULT, root=mnt)
        assert asker.ask(1) is None
        said = asker.trouble()
        assert "status.json cannot be read (the mount itself is failing)" in said, said
        assert "set EPOCHFS_REPORT_URL" not in said, said
