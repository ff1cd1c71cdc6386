"""``epochfs bench fetch --pin STORE:TOOLS``: moto on some CPUs, the benchmark and every tool it
starts on the others, so the store shares no core with the tools it serves (:mod:`epochfs.benchmarks.
_cpu_pin`). Real processes and real affinities; no timed assertion."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from epochfs.benchmarks import fetch
from epochfs.benchmarks._cpu_pin import cpu_list, pin_process, pin_split, pinned

two_cpus = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to pin apart")

# A child with a thread of its own that starts a third once told to: each prints its affinity.
CHILD = """
import os, sys, threading
def show(tag): print(tag, sorted(os.sched_getaffinity(threading.get_native_id())), flush=True)
ready, go = threading.Event(), threading.Event()
t = threading.Thread(target=lambda: (ready.set(), go.wait(), show("old")))
t.start(); ready.wait()
print("up", flush=True)
sys.stdin.readline()
go.set(); t.join()
later = threading.Thread(target=show, args=("new",)); later.start(); later.join()
"""


def test_cpu_lists_read_as_taskset_writes_them() -> None:
    assert cpu_list("0") == {0}
    assert cpu_list("0,2") == {0, 2}
    assert cpu_list("1-3,5") == {1, 2, 3, 5}
    for bad in ("", "a", "1-", "3-1", "0;1"):
        with pytest.raises(ValueError):
            cpu_list(bad)


def test_a_pin_names_two_disjoint_sets_of_cpus_this_process_has() -> None:
    with pytest.raises(ValueError, match="STORE:TOOLS"):
        pin_split("0")
    with pytest.raises(ValueError, match="overlap"):
        pin_split("0-1:1")
    with pytest.raises(ValueError, match="'0:': the tools' CPUs: '' is no CPU list"):
        pin_split("0:")
    with pytest.raises(ValueError, match="':1': the store's CPUs: '' is no CPU list"):
        pin_split(":1")
    with pytest.raises(ValueError, match="not available"):
        pin_split(f"0:{max(os.sched_getaffinity(0)) + 1}")


@two_cpus
def test_every_thread_of_the_store_is_pinned_and_so_are_its_later_ones() -> None:
    store, _ = sorted(os.sched_getaffinity(0))[:2]
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().strip() == "up"
        assert pin_process(child.pid, {store}) == 2  # the main thread and its thread
        child.stdin.write("\n")
        child.stdin.flush()
        out, _ = child.communicate(timeout=30)
    finally:
        child.kill()
    assert out.split("\n")[:2] == [f"old [{store}]", f"new [{store}]"], out


@two_cpus
def test_the_tools_run_on_theirs_and_this_process_gets_its_cpus_back() -> None:
    store, tools = sorted(os.sched_getaffinity(0))[:2]
    own = os.sched_getaffinity(0)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with pinned(sleeper.pid, {store}, {tools}):
            seen = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                                  capture_output=True, text=True, check=True).stdout.strip()
            assert os.sched_getaffinity(sleeper.pid) == {store}
        assert seen == f"[{tools}]"
        assert os.sched_getaffinity(0) == own
    finally:
        sleeper.kill()
        sleeper.wait()


@two_cpus
def test_bench_fetch_with_a_pin_runs_and_says_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    own = os.sched_getaffinity(0)
    store, tools = sorted(own)[:2]
    rc = fetch.main(["--large", "2", "--large-size", "8192", "--small", "0", "--repeat", "1",
                     "--tools", "epochfs,s5cmd", "--checksums", "crc64nvme", "--dir", str(tmp_path),
                     "--pin", f"{store}:{tools}"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"moto on CPU(s) {store}, this benchmark and the tools on {tools} (--pin)" in out, out
    assert os.sched_getaffinity(0) == own


def test_a_bad_pin_is_refused_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        fetch.main(["--pin", "0:0"])
    assert e.value.code == 2
    assert "--pin: '0:0': the store's and the tools' CPUs overlap" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        fetch.main(["--pin", "0:1", "--endpoint", "http://127.0.0.1:9"])
    assert "not with --endpoint" in capsys.readouterr().err
