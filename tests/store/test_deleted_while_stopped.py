"""An object file deleted while the sampler was stopped is found soon after the next start and
fetched again into its place (docs/design.md: marked for repair in place).

Before: start-up recovery checked only the names in its journal, and the background scan of the
object files ran after the first full check of the index, 6 hours on: readers of the live epochs
got ENOENT for that sample meanwhile. The real ``epochfs sample`` over a ``file://`` folder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from common import wait_until
from store_helpers import sample_checksums

from epochfs.sidecar.store import INDEX_NAME, Store

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
ENV = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}


def _stats(cache: Path) -> tuple[int, int, int]:
    """(samples, corrupt_objects_total, repaired_total)."""
    if not (cache / INDEX_NAME).exists():
        return 0, 0, 0
    with Store(cache) as store:
        s = store.stats()
        return s.samples, s.corrupt_objects_total, s.repaired_total


def _run_until(cache: Path, data: Path, condition: object) -> None:
    proc = subprocess.Popen([EPOCHFS, "sample", "--cache", str(cache), "--remote", data.as_uri(),
                             "--scrub-rate", "0"],
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: condition() or proc.poll() is not None, timeout=60,  # type: ignore[operator]
                   what="the sampler's progress")
        assert proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]


def test_a_file_deleted_while_stopped_is_fetched_again_after_the_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    bodies = {f"{i:02d}.bin": os.urandom(500 + i) for i in range(8)}
    for name, body in bodies.items():
        (data / name).write_bytes(body)
    cache = tmp_path / "cache"
    _run_until(cache, data, lambda: _stats(cache)[0] == 8)
    with Store(cache) as store:
        key, _, path = sample_checksums(store)[3]
    path.unlink()
    _run_until(cache, data, lambda: _stats(cache)[2] >= 1 and path.exists())
    assert _stats(cache)[:2] == (8, 1)
    assert path.read_bytes() == bodies[key]
