"""Build and process metrics (issue 23): ``epochfs_build_info`` and the ``process_*`` families of
the supervisor and of each child, read back from the registry and compared with what /proc says
of each process; kept apart by a ``process`` label through the merge (which sums samples with
equal labels); followed across a child restart on a live sidecar."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from common import S3Server, put_objects, random_objects, wait_until
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sidecar_helpers import running_sidecar

import epochfs
from epochfs.sidecar import metrics

PAGE = os.sysconf("SC_PAGE_SIZE")
LINUX = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process_* read /proc")

# A child that holds 40 extra fds and 64 MiB, burns a little CPU, says so, and waits for stdin to close.
CHILD = """
import os, sys, time
fds = [os.open(os.devnull, os.O_RDONLY) for _ in range(40)]
ballast = bytearray(64 * 1024 * 1024)
for i in range(0, len(ballast), 4096):
    ballast[i] = 1
start = time.process_time()
while time.process_time() - start < 0.3:
    pass
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.fixture
def child() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        yield proc
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=10)


def registry(children: dict[str, metrics.Pid] | None = None) -> CollectorRegistry:
    return metrics.sidecar_registry(stats=lambda: None, multiproc_dir=None,
                                    sidecar=metrics.SidecarMetrics(registry=CollectorRegistry()),
                                    children=children)


def proc_rss(pid: int | str) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE


def test_build_info_is_one_with_the_installed_version() -> None:
    reg = registry()
    assert epochfs.__version__ == version("epochfs")
    assert reg.get_sample_value("epochfs_build_info", {"version": epochfs.__version__}) == 1
    [family] = [f for f in reg.collect() if f.name == "epochfs_build_info"]
    assert family.type == "gauge" and len(family.samples) == 1
    other = CollectorRegistry()
    other.register(metrics.BuildInfoCollector("9.9.9"))
    assert other.get_sample_value("epochfs_build_info", {"version": "9.9.9"}) == 1


@LINUX
def test_each_process_has_its_own_series_matching_proc(child: subprocess.Popen[str]) -> None:
    reg = registry({"sampler": lambda: child.pid, "fuse": lambda: None})
    get = reg.get_sample_value
    # The child: its own fds, memory, CPU and start, not the supervisor's nor a sum.
    assert get("process_open_fds", {"process": "sampler"}) == len(os.listdir(f"/proc/{child.pid}/fd"))
    assert get("process_open_fds", {"process": "sampler"}) >= 43
    rss = get("process_resident_memory_bytes", {"process": "sampler"})
    assert rss is not None and rss >= 64 * 1024 * 1024
    assert rss == pytest.approx(proc_rss(child.pid), rel=0.02)
    assert (get("process_cpu_seconds_total", {"process": "sampler"}) or 0) >= 0.25
    assert (get("process_virtual_memory_bytes", {"process": "sampler"}) or 0) >= rss
    assert (get("process_max_fds", {"process": "sampler"}) or 0) > 0
    # This process as the supervisor.
    own_fds = len(os.listdir("/proc/self/fd"))
    assert get("process_open_fds", {"process": "supervisor"}) == pytest.approx(own_fds, abs=3)
    own_rss = proc_rss("self")
    assert get("process_resident_memory_bytes", {"process": "supervisor"}) == pytest.approx(own_rss, rel=0.1)
    assert get("process_start_time_seconds", {"process": "sampler"}) >= get("process_start_time_seconds",
                                                                           {"process": "supervisor"})
    # A child that is not running has no series; nothing is exported without a process label.
    text = generate_latest(reg).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("process_cpu_seconds", "process_resident_memory_bytes", "process_open_fds"):
        assert {s.labels.get("process") for s in families[name].samples} == {"supervisor", "sampler"}, name
        assert text.count(f"# TYPE {name}") == 1
    assert families["python_info"].samples[0].value == 1
    # The whole exposition stays valid for Prometheus.
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


@LINUX
def test_a_child_that_exits_drops_out(child: subprocess.Popen[str]) -> None:
    pid = child.pid
    reg = registry({"sampler": lambda: pid})
    assert reg.get_sample_value("process_open_fds", {"process": "sampler"}) is not None
    assert child.stdin is not None
    child.stdin.close()
    child.wait(timeout=10)
    assert reg.get_sample_value("process_open_fds", {"process": "sampler"}) is None
    assert reg.get_sample_value("process_open_fds", {"process": "supervisor"}) is not None


def test_unknown_child_names_are_refused() -> None:
    with pytest.raises(ValueError, match="worker"):
        metrics.process_collectors({"worker": lambda: 1})
    with pytest.raises(ValueError, match="supervisor"):
        metrics.process_collectors({"supervisor": lambda: 1})


@pytest.mark.fuse
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE")
def test_a_live_sidecar_exports_each_processs_metrics_and_follows_a_restart(s3: S3Server,
                                                                           tmp_path: Path) -> None:
    put_objects(s3, "proc", random_objects(20, 4096))
    with running_sidecar(tmp_path, remote="s3://proc", endpoint=s3.endpoint,
                         extra=("--capacity", "16Mi", "--min-samples", "1")) as car:
        assert car.metric("epochfs_build_info", version=epochfs.__version__) == 1
        pids = {"supervisor": car.proc.pid, "sampler": car.child_pid("sampler"),
                "fuse": car.child_pid("fuse")}
        assert all(pids.values()), pids
        for name in pids:
            fds = car.metric("process_open_fds", process=name)
            assert fds is not None and fds > 0, name
            started = car.metric("process_start_time_seconds", process=name)
            assert started is not None
        # Kill the sampler: the supervisor restarts it and the series follow the new pid.
        before = car.metric("process_start_time_seconds", process="sampler")
        os.kill(pids["sampler"], signal.SIGKILL)
        wait_until(lambda: car.child_pid("sampler") not in (None, pids["sampler"]), timeout=30,
                   what="a new sampler")
        new = car.child_pid("sampler")
        assert new is not None
        wait_until(lambda: (car.metric("process_start_time_seconds", process="sampler") or 0) > (before or 0),
                   timeout=10, what="the new sampler's start time")
        assert car.metric("epochfs_child_restarts_total", child="sampler") == 1
