"""The listing runs in a process of its own beside the sampler (``--list-process``, the default;
sidecar/listing/process.py), and that process's lifetime is the sampler's:

- the listers are not threads of the sampler's process (their CPU does not share its GIL);
- a listing process killed mid-listing (kill -9, an OOM kill) is started again and the listing
  resumes from the index: every key is cataloged, the sampler never stops;
- a sampler killed with -9 takes its listing process with it (``PR_SET_PDEATHSIG``), and one
  stopped with SIGTERM exits 0 with its listing process gone;
- an ``epochfs/`` folder in the working folder is not imported by the child (``python -c`` puts
  the working folder first on its path): the listing runs;
- a remote that fits in the discovery's one page is listed by it, with no process to wait for;
- a child that cannot start (exits before it says anything) stops the sampler with the reason after
  a few tries, where one that ran and died is started again however often.

Real ``epochfs sample`` processes against the synthetic S3 endpoint (benchmarks/synthetic_s3.py),
whose list latency keeps a listing of 30,000 keys running for seconds.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import wait_until
from sampler_helpers import index_rows, running_sampler, s3_env, start_sampler

from epochfs.benchmarks.synthetic_s3 import Dataset, SyntheticS3

KEYS = 30_000


@pytest.fixture
def s3() -> Iterator[SyntheticS3]:
    # 0.25 s a page: the listing of 30,000 keys (30 pages at least, 4 listers) lasts seconds.
    with SyntheticS3(Dataset(KEYS, 64, classes=10, prefix="train/"), list_latency=0.25) as server:
        yield server


@pytest.fixture
def quick_s3() -> Iterator[SyntheticS3]:
    """The same keys at 0.1 s a page, for the test that waits for the whole listing: it still runs
    for seconds after its first page (about 200 pages with the planner's small first pages, 30 at
    the least) where the kill comes within milliseconds of that page, and ends in about 5 s, not 15."""
    with SyntheticS3(Dataset(KEYS, 64, classes=10, prefix="train/"), list_latency=0.1) as server:
        yield server


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            pass
    return out


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].split()[0] == "Z"  # a zombie has exited
    except FileNotFoundError:
        return True


def cataloged(cache: Path) -> int:
    rows = index_rows(cache, "SELECT count(*) FROM catalog")
    return int(rows[0][0]) if rows else 0


def listing_complete(cache: Path) -> bool:
    return bool(index_rows(cache, "SELECT value FROM meta WHERE name = 'listing_complete'"))


@pytest.mark.long
def test_a_listing_process_killed_mid_listing_is_started_again_and_the_listing_ends(
        quick_s3: SyntheticS3, tmp_path: Path) -> None:
    cache, s3 = tmp_path / "cache", quick_s3
    with running_sampler(cache, s3.url, "--endpoint-url", s3.endpoint, "--capacity", "4Mi",
                         env=s3_env(s3.endpoint)) as sp:
        wait_until(lambda: len(children(sp.proc.pid)) == 1, what="the listing process")
        (child,) = children(sp.proc.pid)
        wait_until(lambda: cataloged(cache) > 0, what="the first page committed")
        assert not listing_complete(cache), "the listing ended before the test could kill it"
        assert len(os.listdir(f"/proc/{child}/task")) > 4  # its listers (--list-threads 4), main
        os.kill(child, signal.SIGKILL)
        wait_until(lambda: "the listing process exited with -9; starting it again" in sp.log_text(),
                   what="the restart logged")
        wait_until(lambda: listing_complete(cache), timeout=120, what="the listing to its end")
        assert sp.alive()
        assert cataloged(cache) == KEYS
        now = children(sp.proc.pid)
        assert now and child not in now
        last = now[0]
    wait_until(lambda: gone(last), what="the listing process to end with the sampler")
    assert "Traceback" not in sp.log_text()


def test_a_sampler_killed_with_minus_9_takes_its_listing_process_with_it(
        s3: SyntheticS3, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    sp = start_sampler(cache, s3.url, "--endpoint-url", s3.endpoint, "--capacity", "4Mi",
                       env=s3_env(s3.endpoint))
    try:
        wait_until(lambda: len(children(sp.proc.pid)) == 1, what="the listing process")
        (child,) = children(sp.proc.pid)
        wait_until(lambda: cataloged(cache) > 0, what="the child listing (its start-up done)")
        # Stopped, it cannot notice its socket close: only the kernel (PR_SET_PDEATHSIG) ends it.
        os.kill(child, signal.SIGSTOP)
    finally:
        sp.proc.kill()
        sp.proc.wait()
    try:
        wait_until(lambda: gone(child), what="the listing process to die with the sampler")
    finally:
        if not gone(child):
            os.kill(child, signal.SIGKILL)


def test_on_threads_when_asked_no_listing_process(s3: SyntheticS3, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with running_sampler(cache, s3.url, "--endpoint-url", s3.endpoint, "--capacity", "4Mi",
                         "--list-process", "0", env=s3_env(s3.endpoint)) as sp:
        wait_until(lambda: cataloged(cache) > 0, what="the first page committed")
        assert children(sp.proc.pid) == []


def test_an_epochfs_folder_in_the_working_folder_is_not_what_the_child_imports(
        s3: SyntheticS3, tmp_path: Path) -> None:
    decoy = tmp_path / "work" / "epochfs"
    decoy.mkdir(parents=True)
    (decoy / "__init__.py").write_text("raise SystemExit('the decoy epochfs was imported')\n")
    cache = tmp_path / "cache"
    with running_sampler(cache, s3.url, "--endpoint-url", s3.endpoint, "--capacity", "4Mi",
                         env=s3_env(s3.endpoint), cwd=decoy.parent) as sp:
        wait_until(lambda: cataloged(cache) > 0, what="the first page committed by the child")
        assert "listing in process" in sp.log_text()
    assert "decoy" not in sp.log_text()


def test_a_remote_that_fits_in_one_page_is_listed_without_a_process(tmp_path: Path) -> None:
    with SyntheticS3(Dataset(40, 64, prefix="train/"), list_latency=0) as small:
        cache = tmp_path / "cache"
        with running_sampler(cache, small.url, "--endpoint-url", small.endpoint, "--capacity", "4Mi",
                             env=s3_env(small.endpoint)) as sp:
            wait_until(lambda: sp.stats()["samples"] == 40, what="every object")
            assert children(sp.proc.pid) == []
        assert "listing in process" not in sp.log_text()


def test_a_listing_process_that_cannot_start_ends_the_sampler_with_the_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A child that exits before it says anything (a broken install: here a real interpreter that
    exits 3 at once) is started again a few times, then the sampler is stopped with the reason
    instead of restarting it forever with a warning each time."""
    import threading

    from inprocess import settings_for

    from epochfs.sidecar.config import ConfigError
    from epochfs.sidecar.listing import process

    monkeypatch.setattr(process, "_BOOT", "import sys; sys.exit(3)")
    monkeypatch.setattr(process, "pause_bound", lambda *a, **k: 0.0)  # no pauses between starts
    stop = threading.Event()
    proc = process.ListingProcess(settings_for(tmp_path / "cache"), stop=stop, grace=2.0, served=0)
    proc.start()
    proc.join(timeout=60)
    assert not proc.is_alive() and stop.is_set()
    assert isinstance(proc.fatal, ConfigError)  # exit 2 with the reason: no restart mends it
    assert f"exited with 3 before it said anything, {process.MAX_FAILED_STARTS} times" in str(proc.fatal)
    assert "--list-process 0" in str(proc.fatal)


def test_a_listing_process_that_started_is_not_counted_as_failing_to_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Children that said they run before they died (killed mid-listing, out of memory) are started
    again however many there are: only a child that never spoke counts toward giving up."""
    import threading

    from inprocess import settings_for

    from epochfs.sidecar.listing import process

    starts = tmp_path / "starts"
    monkeypatch.setattr(process, "_BOOT", (
        "import sys\n"
        "from multiprocessing.connection import Connection\n"
        f"open({str(starts)!r}, 'a').write('x')\n"
        "Connection(int(sys.argv[2])).send(('running', True))\n"
        "sys.exit(3)\n"))
    monkeypatch.setattr(process, "pause_bound", lambda *a, **k: 0.0)
    stop = threading.Event()
    proc = process.ListingProcess(settings_for(tmp_path / "cache"), stop=stop, grace=2.0, served=0)
    proc.start()
    try:
        wait_until(lambda: starts.exists() and len(starts.read_text()) > process.MAX_FAILED_STARTS,
                   timeout=60, what="children started again")
        assert proc.fatal is None and not stop.is_set()
    finally:
        stop.set()
        proc.join(timeout=30)
    assert not proc.is_alive() and proc.fatal is None


def test_the_listing_process_tells_its_child_what_the_sampler_does_and_sets_the_given_event(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``fetching`` and ``running`` are given at construction (``epochfs sample`` makes them before
    the listing process and the sampler): whether the sampler fetches reaches the child, and what
    the child says of its listing sets and clears the event given, the one the fetch order reads.
    The child here answers each ``fetching`` with a ``running`` of the same value."""
    import threading

    from inprocess import settings_for

    from epochfs.sidecar.listing import process

    monkeypatch.setattr(process, "_BOOT", (
        "import sys\n"
        "from multiprocessing.connection import Connection\n"
        "conn = Connection(int(sys.argv[2]))\n"
        "while True:\n"
        "    message = conn.recv()\n"
        "    if message[0] == 'fetching': conn.send(('running', message[1]))\n"
        "    if message[0] == 'stop': sys.exit(0)\n"))
    stop, fetching, running = threading.Event(), threading.Event(), threading.Event()
    fetching.set()
    proc = process.ListingProcess(settings_for(tmp_path / "cache"), stop=stop, grace=10.0, served=0,
                                  fetching=fetching.is_set, running=running)
    assert proc.running is running
    proc.start()
    try:
        wait_until(running.is_set, timeout=60, what="the child told the sampler fetches")
        fetching.clear()
        wait_until(lambda: not running.is_set(), timeout=60, what="the child told it stopped")
    finally:
        stop.set()
        proc.join(timeout=30)
    assert not proc.is_alive() and proc.fatal is None


def test_what_a_child_said_before_it_exited_is_read_after_its_exit(tmp_path: Path) -> None:
    """A child refused by the capacity check sends its reason and exits 2 at once; the parent,
    finding it exited between two looks at the connection, read nothing more, took it for a
    crash and started it again: ``epochfs sample --capacity 1`` hung now and then (one run in
    about 80) instead of exiting 2. The message is read from the connection after the exit."""
    import socket
    import subprocess
    import sys
    import threading
    from multiprocessing.connection import Connection

    from inprocess import settings_for

    from epochfs.sidecar.config import ConfigError
    from epochfs.sidecar.listing import process

    parent_end, child_end = socket.socketpair()
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom multiprocessing.connection import Connection\n"
         "Connection(int(sys.argv[1])).send(('fatal', True, '--capacity: every object is too large'))\n"
         "sys.exit(2)\n", str(child_end.fileno())], pass_fds=(child_end.fileno(),))
    child_end.close()
    assert child.wait(timeout=60) == 2  # gone before the parent looks
    conn = Connection(parent_end.detach())
    lp = process.ListingProcess(settings_for(tmp_path / "cache"), stop=threading.Event(), grace=2.0, served=0)
    try:
        lp._drain(conn, child)
    finally:
        conn.close()
    assert isinstance(lp.fatal, ConfigError) and "--capacity: every object" in str(lp.fatal)
    assert lp.stop.is_set()
