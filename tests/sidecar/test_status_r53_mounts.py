"""``epochfs status --mount`` on real mounts (review r53).

* ``--watch`` ended with exit 2 at the first read error, while a FUSE server restart the sidecar
  repairs within a second makes one read fail: the watch now shows the error as a line and reads
  again at the next interval (the ``--json`` watch too, its errors on stderr); one-shot status
  keeps its exit 2.
* ``--mount`` given through a symlink to a FUSE mount was taken for the folder view (the mount
  table holds the real path), so its advice on how epoch 0 is cut was the folder view's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import admit, make_objects, mounted, open_store
from sampler_helpers import index_rows
from store_helpers import put

from epochfs.sidecar.status import FIRST_CUT
from epochfs.sidecar.store import Policy, Store
from epochfs.torchclient import layout

needs_fuse = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                                reason="needs root and FUSE")
STATUS = [sys.executable, "-m", "epochfs.sidecar.cli", "status"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}


def _screens(out: Path) -> list[str]:
    return out.read_text(errors="replace").split("\x1b[H\x1b[2J")


def _stop(proc: subprocess.Popen[bytes]) -> int | None:
    """Stop a watch of ours (by its pid) and say whether it was still running: None if it was."""
    rc = proc.poll()
    if rc is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    return rc


@needs_fuse
def test_watch_outlives_a_fuse_server_restart(tmp_path: Path) -> None:
    cache, mnt, out = tmp_path / "cache", tmp_path / "mnt", tmp_path / "watch.out"
    with open_store(cache) as store:
        admit(store, make_objects(4, 100))
        store.cut()
    with open(out, "wb") as sink:
        watch = subprocess.Popen([*STATUS, "--mount", str(mnt), "--watch", "--interval", "0.2"],
                                 stdout=sink, stderr=subprocess.STDOUT, env=_env())
    try:
        with mounted(cache, mnt) as m:
            wait_until(lambda: any("cache [" in s for s in _screens(out)), timeout=60,
                       what="a first screen")
            m.proc.send_signal(signal.SIGKILL)  # the server dies; the mount answers ENOTCONN
            m.proc.wait()
            wait_until(lambda: "--mount: cannot read" in _screens(out)[-1]
                       or watch.poll() is not None, timeout=60, what="the read error shown")
        # Between the two servers the mount point is an empty folder: still an error, still watched.
        errors = len(_screens(out))
        with mounted(cache, mnt):
            wait_until(lambda: any("cache [" in s for s in _screens(out)[errors:])
                       or watch.poll() is not None, timeout=60, what="a screen after the restart")
    finally:
        rc = _stop(watch)
    text = out.read_text(errors="replace")
    assert rc is None, f"the watch ended (exit {rc}) at a read error:\n{text[-2000:]}"
    assert "(read again at the next interval)" in text
    # One-shot status keeps its exit 2 on the error.
    proc = subprocess.run([*STATUS, "--mount", str(mnt)], capture_output=True, text=True,
                          env=_env(), timeout=60)
    assert proc.returncode == 2 and "is not an epochfs mount" in proc.stderr, proc.stderr


def test_json_watch_outlives_a_read_error(tmp_path: Path) -> None:
    cache, view = tmp_path / "cache", tmp_path / "view"
    with Store(cache, create=True) as store:
        store.configure(Policy(capacity=10_000, min_samples=1))
        put(store, "train/a.bin", 100)
        store.cut()
        doc = store.stats().to_json()
    status_json = view / layout.CONTROL_DIR / layout.STATUS_NAME
    status_json.parent.mkdir(parents=True)
    status_json.write_text(layout.format_status(doc))
    out, err = tmp_path / "out", tmp_path / "err"
    with open(out, "wb") as o, open(err, "wb") as e:
        watch = subprocess.Popen([*STATUS, "--mount", str(view), "--watch", "--json", "--interval", "0.1"],
                                 stdout=o, stderr=e, env=_env())
    try:
        wait_until(lambda: out.read_text().count("\n") >= 1, timeout=60, what="a first document")
        status_json.unlink()
        status_json.mkdir()  # a read now fails (EISDIR), as one does while a server restarts
        wait_until(lambda: "cannot read" in err.read_text() or watch.poll() is not None,
                   timeout=60, what="the read error on stderr")
        status_json.rmdir()
        status_json.write_text(layout.format_status(doc))
        before = out.read_text().count("\n")
        wait_until(lambda: out.read_text().count("\n") > before or watch.poll() is not None,
                   timeout=60, what="a document after the error")
    finally:
        rc = _stop(watch)
    assert rc is None, f"the JSON watch ended (exit {rc}): {err.read_text()}"
    lines = err.read_text().splitlines()
    assert lines and all("--mount: cannot read" in line for line in lines), lines
    assert all(line.startswith("{") for line in out.read_text().splitlines())


@needs_fuse
def test_a_symlink_to_a_fuse_mount_is_the_fuse_view(tmp_path: Path) -> None:
    cache, mnt, link = tmp_path / "cache", tmp_path / "mnt", tmp_path / "link"
    with open_store(cache, min_samples=3) as store:
        admit(store, make_objects(4, 100))  # enough for epoch 0, which no lookup has cut yet
    link.symlink_to(mnt)
    with mounted(cache, mnt):
        for path in (mnt, link):
            proc = subprocess.run([*STATUS, "--mount", str(path)], capture_output=True, text=True,
                                  env=_env(), timeout=60)
            assert proc.returncode == 0, proc.stderr
            assert FIRST_CUT["fuse"] in proc.stdout, (path, proc.stdout)
            assert "on the folder view" not in proc.stdout, (path, proc.stdout)


@needs_fuse
def test_status_shows_which_epochs_readers_pin(tmp_path: Path) -> None:
    """The EpochfsBackpressure runbook asks status which live epochs are pinned: a read through
    the mount records one (``epochs.last_read``); ``--cache`` shows it as a column and in JSON.
    --keep-epochs 1, so that only the read pins epoch 0 (epoch 1, the newest, is pinned ``kept``:
    tests/sidecar/test_status_pins_kept_r54.py)."""
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    with open_store(cache, keep_epochs=1, in_use_seconds=300.0) as store:
        admit(store, make_objects(3, 100))
        store.cut()
        admit(store, make_objects(3, 100, start=3))
        store.cut()
    with mounted(cache, mnt):
        files = sorted((mnt / "epoch-0").rglob("*.bin"))
        assert files and files[0].read_bytes()
        wait_until(lambda: index_rows(cache, "SELECT last_read FROM epochs WHERE n=0")[0][0] > 0,
                   timeout=60, what="epoch 0's read recorded")
    proc = subprocess.run([*STATUS, "--cache", str(cache), "--json"], capture_output=True,
                          text=True, env=_env(), timeout=60)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["pinned_epochs"] == [0, 1], doc
    assert [(e["epoch"], e["pinned_by"]) for e in doc["epochs"]] == [(0, ["in use"]), (1, ["kept"])]
    text = subprocess.run([*STATUS, "--cache", str(cache)], capture_output=True, text=True,
                          env=_env(), timeout=60).stdout
    rows = text.splitlines()
    header = next(line for line in rows if line.lstrip().startswith("epoch "))
    assert header.split() == ["epoch", "samples", "new", "left", "out", "bytes", "pinned"], text
    assert rows[rows.index(header) + 1].endswith(" in use"), text
    assert rows[rows.index(header) + 2].endswith(" kept"), text
