"""A plain ``epochfs sample`` on a cache that once had a folder view: the publisher lock left in the
cache matters only while a folder view is configured for it, so a sampler started without the
folder-view marker (``EPOCHFS_VIEW=folder``, which ``epochfs sidecar --view folder`` gives its
sampler) removes a lock nobody holds and retires and evicts at once; with the marker it keeps it
and waits for the publisher as before (the real ``epochfs sample`` over a ``file://`` folder, a
cache smaller than the data so that it must evict).

Before the fix the plain sampler sat over budget and "idle" for 60 s ("the folder view's publisher
is not running"), then logged an error about a folder view that does not exist, in every new
sampler process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from common import wait_until

from epochfs.sidecar.store import publisherlock

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
ENV = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
WAITING = "the folder view's publisher is not running"


def _run(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path, Path]:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(40):
        (data / f"{i:02d}.bin").write_bytes(os.urandom(1024))
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / publisherlock.LOCK_NAME).write_text("12345\n")  # left by a publisher long gone
    log = tmp_path / "sample.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([EPOCHFS, "sample", "--cache", str(cache), "--remote", data.as_uri(),
                                 "--capacity", "30Ki", "--cut-interval", "1"],
                                env=env, stdout=out, stderr=subprocess.STDOUT)
    return proc, cache, log


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)


def test_a_plain_sampler_forgets_a_lock_nobody_holds(tmp_path: Path) -> None:
    proc, cache, log = _run(tmp_path, ENV)
    lock = cache / publisherlock.LOCK_NAME
    try:
        wait_until(lambda: proc.poll() is not None or not lock.exists() or WAITING in log.read_text(),
                   timeout=60, what="the leftover lock removed, or the sampler waiting on it")
        assert proc.poll() is None, log.read_text()[-3000:]
        text = log.read_text()
        assert not lock.exists() and WAITING not in text, text[-3000:]
    finally:
        _stop(proc)
    assert "removed" in log.read_text() and WAITING not in log.read_text()


def test_with_the_folder_view_marker_the_sampler_keeps_it_and_waits(tmp_path: Path) -> None:
    proc, cache, log = _run(tmp_path, {**ENV, "EPOCHFS_VIEW": "folder"})
    try:
        wait_until(lambda: proc.poll() is not None or WAITING in log.read_text(), timeout=60,
                   what="the sampler waiting for the folder view's publisher")
        assert proc.poll() is None, log.read_text()[-3000:]
        assert (cache / publisherlock.LOCK_NAME).exists()
    finally:
        _stop(proc)
