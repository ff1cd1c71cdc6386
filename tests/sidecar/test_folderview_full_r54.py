"""The folder view on a full volume keeps retiring (review 54, fixer A54a).

Before: an ``ENOSPC`` raised while publishing (or writing ``status.json``) skipped the rest of the
publisher's step, so while "publishing paused" the folder kept showing the epochs the store had
retired (their objects free to be evicted: "sample file vanished"), ``latest`` pointing at one of
them, manifests of never-shown epochs piled up, and the pause never ended although taking the
retired epochs down would have made the room. And the pause's reason named the link's target (a
cache object, or ``epoch-N``), not the path on the full volume.

A real full volume (a tmpfs with few inodes, filled until ``ENOSPC``), a real store and a real
``epochfs publish`` process; the store's retirement is made by the test (no sampler runs).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import wait_until
from folderview_helpers import fill_inodes, small_tmpfs
from fuse_helpers import EPOCHFS, admit, make_objects, open_store

from epochfs.sidecar.store import Meta, Store
from epochfs.torchclient import epochwalk, layout

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs (root)")


@pytest.fixture
def small_volume(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs with 1,000 inodes and room for its symlinks' pages; always unmounted."""
    with small_tmpfs(tmp_path / "vol", size="32m", inodes=1000) as vol:
        yield vol



def _start(store: Store, folder: Path, log: Path) -> subprocess.Popen[bytes]:
    argv = [*EPOCHFS, "--log-level", "INFO", "publish", "--cache", str(store.root), "--mount", str(folder)]
    with open(log, "ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)


def _stop(proc: subprocess.Popen[bytes], log: Path) -> None:
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    assert proc.returncode == 0, log.read_text()[-3000:]


def _latest(folder: Path) -> str | None:
    path = folder / layout.LATEST_NAME
    return os.readlink(path) if path.is_symlink() else None


def _manifests(folder: Path) -> list[int]:
    names = os.listdir(folder / layout.CONTROL_DIR)
    return sorted(n for n in map(layout.parse_manifest_name, names) if n is not None)


def _alive(proc: subprocess.Popen[bytes], log: Path, check: object) -> object:
    """``check`` while the publisher runs; its exit fails the test at once, with its log."""
    assert proc.poll() is None, f"the publisher exited {proc.returncode}:\n{log.read_text()[-3000:]}"
    return check


def _paused_with_two_epochs(store: Store, folder: Path, log: Path,
                            vol: Path) -> tuple[subprocess.Popen[bytes], list[Path]]:
    """Epochs 0 (100 samples) and 1 (120) cut, then a publisher started: both written whole, each
    with its own links (no tree built ahead to share them), latest on epoch 1; then the volume
    filled until the publisher pauses. Returns the publisher and the fillers."""
    admit(store, make_objects(100, 64, prefix="train/a/"))
    assert store.cut(0) == 0
    admit(store, make_objects(20, 64, prefix="train/b/", start=100))
    assert store.cut(1) == 1
    proc = _start(store, folder, log)
    wait_until(lambda: _alive(proc, log, layout.list_epochs(folder) == [0, 1]
                              and _latest(folder) == "epoch-1"), timeout=60, what="epochs 0 and 1")
    fillers = fill_inodes(vol)
    wait_until(lambda: _alive(proc, log, store.meta(Meta.PUBLISH_PAUSED)), timeout=30,
               what="the publisher paused on the full volume")
    return proc, fillers


def test_while_paused_the_retired_epochs_go_and_latest_with_them(tmp_path: Path, small_volume: Path) -> None:
    """Epoch 2 (520 samples) cannot fit even in the room epochs 0 and 1 leave: publishing stays
    paused, but the epochs the store retired go at once, ``latest`` (on epoch 1) with them, and
    no manifest of theirs stays; room back, epoch 2 is shown."""
    store = open_store(tmp_path / "cache", keep_epochs=1)
    folder = small_volume / "view"
    log = tmp_path / "publish.log"
    proc = None
    try:
        proc, fillers = _paused_with_two_epochs(store, folder, log, small_volume)
        admit(store, make_objects(400, 64, prefix="train/c/", start=200))
        assert store.cut(2) == 2
        # As the sampler does once they are out of their in-use window (their objects may go next).
        assert sorted(store.retire(now=time.time() + 1e6)) == [0, 1]
        wait_until(lambda: _alive(proc, log, layout.list_epochs(folder) == []), timeout=60,
                   what="the retired epochs 0 and 1 taken down while paused")
        assert _latest(folder) is None and not os.path.lexists(folder / layout.LATEST_NAME), \
            "latest never points at an epoch removed"
        assert set(_manifests(folder)) <= {2}, "no manifest outlives its epoch"
        assert store.meta(Meta.PUBLISH_PAUSED), "epoch 2 still has no room: still paused"
        for path in fillers:
            path.unlink()
        wait_until(lambda: _alive(proc, log, layout.list_epochs(folder) == [2]
                                  and _latest(folder) == "epoch-2"), timeout=60, what="epoch 2 shown")
        wait_until(lambda: "publishing resumed" in log.read_text(), timeout=30, what="publishing resumed")
        assert _manifests(folder) == [2]
    finally:
        if proc is not None and proc.poll() is None:
            _stop(proc, log)
        store.close()


def test_the_room_retiring_makes_ends_the_pause_by_itself(tmp_path: Path, small_volume: Path) -> None:
    """Epoch 2 (the same 120 samples) fits in the room epochs 0 and 1 leave: with the volume
    still full of other files, taking them down is what ends the pause."""
    store = open_store(tmp_path / "cache", keep_epochs=1)
    folder = small_volume / "view"
    log = tmp_path / "publish.log"
    proc = None
    try:
        proc, fillers = _paused_with_two_epochs(store, folder, log, small_volume)
        assert store.cut(2, force=True) == 2
        assert sorted(store.retire(now=time.time() + 1e6)) == [0, 1]
        wait_until(lambda: _alive(proc, log, layout.list_epochs(folder) == [2]
                                  and _latest(folder) == "epoch-2"), timeout=60,
                   what="epochs 0 and 1 taken down, epoch 2 shown in their room and latest on it")
        wait_until(lambda: "publishing resumed" in log.read_text(), timeout=30, what="publishing resumed")
        assert _manifests(folder) == [2], "no manifest outlives its epoch"
        entries = epochwalk.walk_epoch(folder, 2)  # skips an entry whose object is gone
        assert len(entries) == 120 and {size for _path, size in entries} == {64}
        for path in fillers:
            path.unlink()
        wait_until(lambda: _alive(proc, log, store.meta(Meta.PUBLISH_PAUSED) is None), timeout=30,
                   what="the pause cleared")
    finally:
        if proc is not None and proc.poll() is None:
            _stop(proc, log)
        store.close()


def test_the_pause_reason_names_the_path_on_the_full_view_volume(tmp_path: Path, small_volume: Path) -> None:
    """A restart on a full volume: recovery's new ``latest`` is a ``symlink("epoch-1", temp)``,
    whose error names the target first; the reason names the temporary link in the folder."""
    store = open_store(tmp_path / "cache", keep_epochs=2)
    admit(store, make_objects(10, 64, prefix="train/a/"))
    assert store.cut(0) == 0
    folder = small_volume / "view"
    log = tmp_path / "publish.log"
    proc = _start(store, folder, log)
    try:
        wait_until(lambda: _alive(proc, log, _latest(folder) == "epoch-0"), timeout=60, what="epoch 0")
        _stop(proc, log)
        fillers = fill_inodes(small_volume)
        proc = _start(store, folder, log)
        reason = wait_until(lambda: _alive(proc, log, store.meta(Meta.PUBLISH_PAUSED)), timeout=30,
                            what="the publisher paused on the full volume")
        assert "the folder view's volume is full" in str(reason), reason
        assert f"{folder}/" in str(reason) and str(store.root) not in str(reason), reason
        assert _latest(folder) == "epoch-0", "what is published stays readable"
        for path in fillers:
            path.unlink()
        wait_until(lambda: _alive(proc, log, store.meta(Meta.PUBLISH_PAUSED) is None), timeout=30,
                   what="the pause cleared")
    finally:
        if proc.poll() is None:
            _stop(proc, log)
        store.close()
