"""The listing process's ``process_*`` series (issue 23): ``process="listing"``.

The listing runs in a child of the sampler (``epochfs.sidecar.listing.child``), not of the
supervisor, so the supervisor has no handle on it; its CPU and memory at 1M+ keys were invisible.
The supervisor finds it under the sampler's pid at every scrape (``metrics.child_of``). Checked
on a live sidecar while it lists a large synthetic remote (benchmarks/synthetic_s3.py, its pages
slowed so the listing is still running when scraped), against what ``/proc`` says of the one
child of the sampler that runs the listing; and ``child_of``'s two ways of reading a process's
children (the kernel's children files, a scan of ``/proc``) agree.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import wait_until
from sidecar_helpers import Sidecar, running_sidecar

from epochfs.benchmarks.synthetic_s3 import Dataset, SyntheticS3
from epochfs.sidecar import metrics, procfs

LINUX = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process_* read /proc")
PAGE = os.sysconf("SC_PAGE_SIZE")


@pytest.fixture
def synthetic(monkeypatch: pytest.MonkeyPatch) -> Iterator[SyntheticS3]:
    """300,000 keys in pages of 1,000 answered 0.1 s apart: the listing takes 30 s or more."""
    for name, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    with SyntheticS3(Dataset(300_000, 64, classes=10, prefix="train/"), list_latency=0.1) as server:
        yield server


def listing_pids(sampler: int) -> list[int]:
    """Children of ``sampler`` that run the listing, from /proc (every process's parent)."""
    return [int(e) for e in os.listdir("/proc") if e.isdigit()
            and _ppid(e) == sampler and _comm(e) == metrics.LISTING_NAME]


def _ppid(pid: str) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _comm(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/comm").read_bytes().rstrip(b"\n")
    except OSError:
        return b""


@LINUX
def test_child_of_finds_the_named_child_by_both_readings() -> None:
    """The child named as the listing names itself (its command line says nothing: a forked child
    keeps its parent's) is found, another child is not."""
    named_code = ("import ctypes, sys; ctypes.CDLL(None).prctl(15, sys.argv[1].encode()); "
                  "print('named', flush=True); sys.stdin.read()")
    named = subprocess.Popen([sys.executable, "-c", named_code, metrics.LISTING_NAME.decode()],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "epochfs-listing"],
                             stdin=subprocess.PIPE)
    try:
        assert named.stdout is not None and named.stdout.readline() == "named\n"
        me = os.getpid()
        assert {named.pid, other.pid} <= set(procfs.children(me))
        assert sorted(procfs.children(me)) == sorted(procfs._children_by_scan(me))
        assert metrics.child_of(lambda: me, metrics.LISTING_NAME)() == named.pid
        assert metrics.child_of(lambda: None, metrics.LISTING_NAME)() is None
    finally:
        for proc in (named, other):
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=10)
        if named.stdout is not None:
            named.stdout.close()
    assert metrics.child_of(lambda: os.getpid(), metrics.LISTING_NAME)() is None, "it exited"


def listing_series(car: Sidecar) -> dict[str, float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {s.name: s.value for f in text_string_to_metric_families(car.metrics()) for s in f.samples
            if s.labels.get("process") == "listing"}


@LINUX
@pytest.mark.fuse
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE")
def test_a_listing_sidecar_exports_the_listing_processs_series(synthetic: SyntheticS3,
                                                                tmp_path: Path) -> None:
    with running_sidecar(tmp_path, remote=synthetic.url, endpoint=synthetic.endpoint,
                         extra=("--capacity", "16Mi", "--min-samples", "1")) as car:
        sampler = car.child_pid("sampler")
        assert sampler is not None
        wait_until(lambda: len(listing_pids(sampler)) == 1, timeout=30, what="the listing process")
        [listing] = listing_pids(sampler)
        series = listing_series(car)
        covered = car.metric("epochfs_listing_covered_ratio")
        assert covered is not None and covered < 1, "scraped while the listing runs"
        assert listing_pids(sampler) == [listing], "the same listing process throughout"
        assert series["process_open_fds"] == pytest.approx(len(os.listdir(f"/proc/{listing}/fd")), abs=3)
        rss = int(Path(f"/proc/{listing}/statm").read_text().split()[1]) * PAGE
        assert series["process_resident_memory_bytes"] == pytest.approx(rss, rel=0.2)
        assert series["process_cpu_seconds_total"] > 0
        assert series["process_start_time_seconds"] >= car.metric("process_start_time_seconds",
                                                                  process="sampler")
        # Its own series, not the sampler's summed in: the two processes differ.
        assert series["process_resident_memory_bytes"] != car.metric("process_resident_memory_bytes",
                                                                     process="sampler")
