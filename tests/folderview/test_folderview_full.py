"""The folder view on a full volume: the publisher pauses with the reason instead of crash-looping
(a raw ``OSError: [Errno 28]`` traceback, restarted every 30 s, ``status.json`` gone, epochs
answered ``live`` on ``/v1/cut`` but never published), keeps what it published readable, and
resumes by itself when room comes back (issue 20, item 3).

A real full volume: a tmpfs with a handful of inodes, filled until ``ENOSPC``; a real
``epochfs publish`` process over a real store."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import wait_until
from folderview_helpers import fill_inodes, small_tmpfs
from fuse_helpers import EPOCHFS, admit, make_objects, open_store

from epochfs.sidecar import cutrequest
from epochfs.sidecar.cutrequest import CutRequest
from epochfs.sidecar.folderview import PAUSED_RETRY
from epochfs.sidecar.folderview_links import AHEAD_TAG
from epochfs.sidecar.store import Meta
from epochfs.torchclient import epochwalk, layout
from epochfs.torchclient.publish import TEMP_PREFIX

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (root)")


@pytest.fixture
def small_volume(tmp_path: Path) -> Iterator[Path]:
    with small_tmpfs(tmp_path / "vol", size="4m", inodes=400) as vol:
        yield vol



def test_a_full_folder_volume_pauses_publishing_and_it_resumes_by_itself(
        tmp_path: Path, small_volume: Path) -> None:
    store = open_store(tmp_path / "cache", keep_epochs=3, in_use_seconds=1000.0)
    admit(store, make_objects(20, 100, prefix="train/a/"))
    store.cut(0)
    folder = small_volume / "view"
    log = tmp_path / "publish.log"
    argv = [*EPOCHFS, "--log-level", "INFO", "publish", "--cache", str(store.root), "--mount", str(folder)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        # The whole first publish before the volume fills: epoch-0/ appears first, latest and then
        # status.json after it (a fill between the two left no status.json to keep readable).
        status_file = folder / layout.CONTROL_DIR / layout.STATUS_NAME
        wait_until(lambda: layout.list_epochs(folder) == [0] and status_file.is_file(), timeout=30,
                   what="epoch 0 and status.json published")
        fillers = fill_inodes(small_volume)
        admit(store, make_objects(60, 100, prefix="train/b/", start=20))
        assert store.cut(1) == 1
        wait_until(lambda: store.meta(Meta.PUBLISH_PAUSED) is not None, timeout=30,
                   what="the publisher's pause recorded")
        text = log.read_text()
        assert "publishing paused" in text and "Traceback" not in text, text[-3000:]
        assert proc.poll() is None, "the publisher must wait for room, not exit"
        assert "volume is full" in str(store.stats().publish_paused)
        # What was published stays readable, status.json included; epoch 1 is not half there.
        assert layout.list_epochs(folder) == [0]
        assert len(list(epochwalk.walk_epoch(folder, 0))) == 20
        assert status_file.is_file()
        # No temporary name left behind but the next epoch's tree built ahead, which stays through
        # the pause unless it met the full volume itself (hidden: readers and list_epochs skip it).
        # A try (every PAUSED_RETRY s) may make a temporary name and remove it on meeting the full
        # volume, so one look can see one in passing: one left behind is never gone.
        def leftovers() -> list[str]:
            return [n for n in os.listdir(folder)
                    if n.startswith(TEMP_PREFIX) and not n.startswith(TEMP_PREFIX + AHEAD_TAG)]

        wait_until(lambda: not leftovers(), timeout=4 * PAUSED_RETRY, interval=0.01,
                   what="no temporary name but the tree built ahead in the folder")
        # /v1/cut tells the truth: epoch 1 is cut, not published.
        code, doc = cutrequest.answer(store, CutRequest(1), unpublished=lambda n: (
            store.meta(Meta.PUBLISH_PAUSED) if not (folder / layout.epoch_name(n)).is_dir() else None))
        assert (code, doc["state"]) == (202, "waiting") and "volume is full" in doc["message"], doc
        status = subprocess.run([*EPOCHFS, "status", "--cache", str(store.root)], capture_output=True,
                                text=True, timeout=60)
        assert "publishing PAUSED" in status.stdout, status.stdout
        # Room again: it publishes by itself.
        for path in fillers:
            path.unlink()
        wait_until(lambda: layout.list_epochs(folder) == [0, 1], timeout=30, what="epoch 1 published")
        wait_until(lambda: store.meta(Meta.PUBLISH_PAUSED) is None, timeout=30, what="the pause cleared")
        assert len(list(epochwalk.walk_epoch(folder, 1))) == 80
        assert "publishing resumed" in log.read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        store.close()
    assert proc.returncode == 0, log.read_text()[-3000:]
