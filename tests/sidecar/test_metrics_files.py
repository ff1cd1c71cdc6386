"""A supervised child started while the metrics' volume is full runs on (its metrics in memory);
one started with room writes only into blocks it allocated first.

Before: prometheus-client made each child's files sparse and wrote through ``mmap`` at once; on a
full tmpfs that store is a SIGBUS: the child (the sampler here, the FUSE server in the 600 s soak)
died with status -7 as it made its first metric.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from common import wait_until
from inprocess import fill, small_volume

from epochfs.sidecar import metrics_files, metrics_merge
from epochfs.sidecar.store import INDEX_NAME, Store
from epochfs.sidecar.supervisor.children import _CHILD_BOOT

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")

ENV = {k: v for k, v in os.environ.items() if not k.startswith(("EPOCHFS_", "PROMETHEUS_"))}


def _samples(cache: Path) -> int:
    if not (cache / INDEX_NAME).exists():
        return 0
    with Store(cache) as store:
        return store.stats().samples


def _run_child(tmp_path: Path, metrics_dir: Path) -> tuple[int, str]:
    """The supervisor's child boot running ``epochfs sample`` over four local files, its
    metrics folder ``metrics_dir``; stopped with SIGTERM once it holds them all."""
    data = tmp_path / "data"
    data.mkdir()
    for i in range(4):
        (data / f"{i}.bin").write_bytes(os.urandom(256))
    cache = tmp_path / "cache"
    env = {**ENV, metrics_files.ENV: str(metrics_dir)}
    argv = [sys.executable, "-P", "-c", _CHILD_BOOT, str(os.getpid()), "--log-level", "INFO",
            "sample", "--cache", str(cache), "--remote", data.as_uri()]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: _samples(cache) == 4 or proc.poll() is not None, timeout=60,
                   what="the child's four samples")
        alive = proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert alive, f"the child exited with status {proc.returncode}: {err[-2000:]}"
    return proc.returncode, err


def test_a_child_started_on_a_full_volume_runs_with_its_metrics_in_memory(tmp_path: Path) -> None:
    with small_volume(tmp_path / "vol", "1m") as vol:
        metrics_dir = vol / "metrics"
        metrics_dir.mkdir()
        fill(vol, leave=0)
        code, err = _run_child(tmp_path, metrics_dir)
        assert code == 0, err[-2000:]
        assert "metrics of this process" in err and "not exported until it restarts" in err, err[-2000:]
        assert "epochfs.metrics WARNING" in err
        assert list(metrics_dir.iterdir()) == [], "nothing half-made is left to be summed"


def test_a_child_with_room_writes_into_files_it_allocated(tmp_path: Path) -> None:
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    code, err = _run_child(tmp_path, metrics_dir)
    assert code == 0, err[-2000:]
    assert "not exported" not in err
    files = sorted(metrics_dir.glob("*.db"))
    assert files, "the child exported its metrics"
    for path in files:
        st = path.stat()
        assert st.st_size >= metrics_files.RESERVED
        assert st.st_blocks * 512 >= metrics_files.RESERVED, f"{path.name} has holes"


def test_a_dead_process_file_of_the_same_pid_is_filled_not_replaced(tmp_path: Path) -> None:
    old = tmp_path / metrics_files.file_names(4242)[0]
    old.write_bytes(b"\1" * 4096)
    os.truncate(old, 1 << 20)  # prometheus-client's sparse 1 MiB
    env = {metrics_files.ENV: str(tmp_path)}
    assert metrics_files.reserve(env, pid=4242) is None
    assert old.stat().st_size == 1 << 20 and old.stat().st_blocks * 512 >= 1 << 20
    assert old.read_bytes()[:4096] == b"\1" * 4096, "its totals are kept"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(metrics_files.file_names(4242))
    assert env[metrics_files.ENV] == str(tmp_path)


def test_no_folder_no_files() -> None:
    env: dict[str, str] = {}
    assert metrics_files.reserve(env, pid=1) is None and env == {}


_KINDS_SCRIPT = """
import glob, os, sys
from epochfs.fuse.metrics import FUSE_ERRNOS, FUSE_OPS, FuseMetrics
from epochfs.sidecar.metrics_sampler import process_metrics
m = process_metrics()
m.set_fetch_window(3); m.set_idle(True); m.cut_waited(0.1); m.remote_failed(); m.remote_retried()
m.throttled(); m.observe_fetch(0.2)
with m.download():
    pass
f = FuseMetrics(registry=None)
for op in FUSE_OPS:
    f.requests.labels(op=op).inc()
    f.lost_reads.labels(op=op).inc()
    for e in FUSE_ERRNOS:
        f.errors.labels(op=op, errno=e).inc()
f.cut_waited(0.1)
for p in glob.glob(os.path.join(sys.argv[1], "*.db")):
    print(os.path.basename(p).rsplit("_", 1)[0])
"""


def test_the_children_s_metrics_write_only_the_kinds_reserved(tmp_path: Path) -> None:
    """Every file the sampler's and the FUSE server's metrics make is one :func:`reserve` allocates,
    and none outgrows :data:`~metrics_files.RESERVED` with every label set in use."""
    out = subprocess.run([sys.executable, "-c", _KINDS_SCRIPT, str(tmp_path)], check=True,
                         env={**ENV, metrics_files.ENV: str(tmp_path)}, capture_output=True, text=True)
    kinds = {line.split()[0] for line in out.stdout.splitlines()}
    assert kinds and kinds <= set(metrics_merge.FILE_KINDS), kinds
    for path in tmp_path.glob("*.db"):
        written = int.from_bytes(path.read_bytes()[:4], "little")  # prometheus-client's used bytes
        assert written <= metrics_files.RESERVED, (path.name, written)
