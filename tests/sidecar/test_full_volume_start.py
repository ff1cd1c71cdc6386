"""A start on a cache volume too full to open the index waits for room; it is no bad setting.

Before: SQLite could not create the index's shared-memory file, ``epochfs sidecar``, ``sample`` and
``status`` printed ``--cache: …/index.sqlite: disk I/O error`` and exited 2, the status of a bad
setting: the supervisor stopped for good (no mount) and a container restarted into the same. Now
the commands exit 75 (try again later) naming the full volume, and the supervisor waits, its probes
and ``epochfs_disk_full`` served meanwhile, then starts once there is room. A real tmpfs of 16 MiB
filled to its last byte.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from common import S3Server, put_objects, random_objects, wait_until
from inprocess import fill, small_volume
from sidecar_helpers import EPOCHFS, running_sidecar

from epochfs.sidecar.config import EXIT_RETRY
from epochfs.sidecar.store import Store

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]


def _full_cache(tmp_path: Path, vol: Path) -> tuple[Path, Path]:
    """A cache made and closed cleanly on ``vol``, then the volume filled: (cache, the filler)."""
    cache = vol / "cache"
    with Store(cache, create=True):
        pass
    return cache, fill(vol, leave=0)


def test_commands_on_a_full_volume_exit_75_naming_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"a" * 100)
    with small_volume(tmp_path / "vol", "16m") as vol:
        cache, _ = _full_cache(tmp_path, vol)
        for argv in (["status", "--cache", str(cache)],
                     ["sample", "--cache", str(cache), "--remote", data.as_uri()]):
            r = subprocess.run([*EPOCHFS, *argv], capture_output=True, text=True, timeout=60)
            assert r.returncode == EXIT_RETRY, (argv, r.returncode, r.stderr[-2000:])
            assert "the cache's volume is full" in r.stderr and "waiting for room" in r.stderr, r.stderr


def test_the_sidecar_waits_for_room_then_starts(s3: S3Server, tmp_path: Path) -> None:
    put_objects(s3, "data", random_objects(4, 1024))
    with small_volume(tmp_path / "vol", "16m") as vol:
        cache, filler = _full_cache(tmp_path, vol)
        (tmp_path / "cache").symlink_to(cache)  # where running_sidecar puts the cache
        with running_sidecar(tmp_path, remote="s3://data", endpoint=s3.endpoint,
                             expect_ready=False) as car:
            wait_until(lambda: "the cache's volume is full" in car.log_text() or car.proc.poll() is not None,
                       timeout=30, what="the wait for room in the log")
            assert car.proc.poll() is None, car.log_text()[-3000:]
            # Its ports answer while it waits: alive, not ready, and epochfs_disk_full for the
            # EpochfsDiskFull alert (without them the probes are refused and the target is down).
            code, body = car.get("/healthz")
            assert code == 200 and b"the cache's volume is full" in body, (code, body)
            code, body = car.get("/readyz")
            assert code == 503 and "waiting for room" in json.loads(body)["reason"], (code, body)
            assert car.metric("epochfs_disk_full") == 1
            filler.unlink()
            wait_until(lambda: car.get("/readyz")[0] == 200 or car.proc.poll() is not None,
                       timeout=60, what="/readyz once there is room")
            assert car.proc.poll() is None, car.log_text()[-3000:]
            assert len(os.listdir(car.mount / "epoch-0")) >= 1  # the lookup cuts epoch 0
            # The real endpoints took the ports over: the sidecar's own series and checks.
            assert car.metric("epochfs_disk_full") == 0
            assert json.loads(car.get("/healthz")[1])["mount"] == "ok"


def test_a_stop_while_waiting_for_room_exits_0(s3: S3Server, tmp_path: Path) -> None:
    """SIGTERM during the wait (a pod deleted before its volume had room): exit 0 and a line, as a
    running sidecar stops (running_sidecar checks the status and the time), not killed by it."""
    put_objects(s3, "data", random_objects(1, 1024))
    with small_volume(tmp_path / "vol", "16m") as vol:
        cache, _ = _full_cache(tmp_path, vol)
        (tmp_path / "cache").symlink_to(cache)
        with running_sidecar(tmp_path, remote="s3://data", endpoint=s3.endpoint,
                             expect_ready=False) as car:
            wait_until(lambda: "the cache's volume is full" in car.log_text() or car.proc.poll() is not None,
                       timeout=30, what="the wait for room in the log")
            assert car.get("/healthz")[0] == 200
        log = car.log_text()
        assert "stopped while waiting for room on the cache's volume" in log, log[-3000:]
