"""A MISSING ``index.sqlite`` beside a cache's epochs and objects is damage, as an index file
without schema is (test_empty_index_r53.py): the read-only commands say the index is missing and
write nothing, and the sampler's start rebuilds it from the epochs' members files (under the
reset lock, one opener of several), never a fresh empty index.

Before (review r2, task A53d): the sampler's start made a fresh empty index, and its recovery
then removed epoch 0's members file ("never cut") and every object file as an orphan; after an
index deleted under a running sampler the restart did the same, where docs/design.md promises
the start "as after a reset". ``epochfs status`` said "no epochfs cache there (no index.sqlite)".
A new cache (no index, ``objects/`` with its marker only, no ``epochs/``) is still made fresh.

Real ``epochfs`` processes over a ``file://`` folder; real SQLite files and locks.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import cut_cache_helpers as cc
import pytest
from common import wait_until
from sampler_helpers import running_sampler, start_sampler

from epochfs.sidecar.store import INDEX_NAME
from epochfs.sidecar.store.objects import MARKER_PREFIX, OBJECTS_DIR
from epochfs.sidecar.store.reset import CORRUPT_INFIX, LOCK_NAME

ENV, FILES = cc.ENV, cc.FILES
HELD = "the members file(s) of epoch(s) 0 and object files in objects/"


@pytest.fixture(scope="module")
def cut_cache(tmp_path_factory: pytest.TempPathFactory) -> cc.CutCache:
    """(a stopped cache with every sample of the remote cached and epoch 0 cut, the remote's
    folder, the object files of epoch 0), made once by the real sampler and ``epochfs cut``."""
    return cc.make_cut_cache(tmp_path_factory.mktemp("r53d"))


def _delete_index(cache: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        (cache / f"{INDEX_NAME}{suffix}").unlink(missing_ok=True)


def _folder(cache: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(cache.iterdir()) if p.is_file()}


def _assert_rebuilt(cache: Path, objects: set[str], log: str) -> None:
    """Epoch 0 and every object file back, the one line of the rebuild saying "missing"."""
    assert (f"the cache index {cache / INDEX_NAME} is damaged (the index is missing, but the cache holds "
            f"{HELD}): the index file is missing, so nothing to move aside") in log, log[-3000:]
    assert "epochs 0 restored from their members files" in log, log[-3000:]
    assert "never cut" not in log, log[-3000:]
    assert cc.epochs(cache) == [0]
    assert objects <= cc.objects(cache)  # every object file of epoch 0 is still there
    assert (cache / "epochs" / "epoch-0.members").is_file()
    assert not list(cache.glob(f"{INDEX_NAME}{CORRUPT_INFIX}*[0-9Z]")), "no index to keep aside"


def test_read_commands_say_the_index_is_missing_and_write_nothing(
        cut_cache: tuple[Path, Path, set[str]], tmp_path: Path) -> None:
    cache, _, _ = cc.copy_cache(cut_cache, tmp_path)
    _delete_index(cache)
    before = _folder(cache)
    for command in (["status"], ["verify", "--report-only"], ["cut"]):
        r = cc.epochfs(*command, "--cache", str(cache))
        assert r.returncode == 2, (command, r.stdout, r.stderr)
        [line] = r.stderr.strip().splitlines()
        # The family of every damaged index's refusal: "epochfs CMD: --cache: PATH: reason".
        assert line == (f"epochfs {command[0]}: --cache: {cache / INDEX_NAME}: damaged: the index is "
                        f"missing, but the cache holds {HELD}; the sampler's next start rebuilds it "
                        f"from the epochs' members files"), line
        assert r.stdout == ""
        assert _folder(cache) == before, command  # no index, -wal, -shm or marker written


@pytest.mark.parametrize("status_first", [True, False])
def test_the_sampler_start_rebuilds_a_missing_index_and_keeps_epoch_0(
        cut_cache: tuple[Path, Path, set[str]], tmp_path: Path, status_first: bool) -> None:
    cache, data, objects = cc.copy_cache(cut_cache, tmp_path)
    _delete_index(cache)
    if status_first:
        assert cc.epochfs("status", "--cache", str(cache)).returncode == 2
    # The start returns once the sampler logged its recovery: the rebuild and the orphans' removal
    # are behind it.
    with running_sampler(cache, data.as_uri(), "--capacity", "64Mi") as sp:
        assert cc.samples(cache) == FILES
    log = sp.log_text()
    _assert_rebuilt(cache, objects, log)
    assert " 0 orphan object(s) removed" in log, log[-3000:]
    status = cc.epochfs("status", "--cache", str(cache), "--json")
    assert status.returncode == 0, status.stderr


def test_an_index_deleted_under_the_running_sampler_is_rebuilt_at_its_restart(
        cut_cache: tuple[Path, Path, set[str]], tmp_path: Path) -> None:
    """The sampler exits 1 when its index is deleted under it; the restart (the supervisor's)
    rebuilds the index from the members files instead of making a fresh one."""
    cache, data, objects = cc.copy_cache(cut_cache, tmp_path)
    sp = start_sampler(cache, data.as_uri(), "--capacity", "64Mi")
    try:
        (cache / INDEX_NAME).unlink()
        rc = sp.proc.wait(timeout=120)
    finally:
        sp.stop()
    assert rc == 1, sp.log_text()[-3000:]
    assert "the cache index was deleted under the running sampler" in sp.log_text(), sp.log_text()[-3000:]
    assert not (cache / INDEX_NAME).exists()
    with running_sampler(cache, data.as_uri(), "--capacity", "64Mi") as again:
        assert cc.samples(cache) == FILES
    _assert_rebuilt(cache, objects, again.log_text())


def _blocked_on(lock: Path) -> int:
    """How many processes wait for the ``flock`` of ``lock`` (the ``->`` lines of /proc/locks)."""
    inode = os.stat(lock).st_ino
    lines = Path("/proc/locks").read_text().splitlines()
    return sum(1 for line in lines
               if "->" in line and "FLOCK" in line and line.split()[6].endswith(f":{inode}"))


OPENER = """
import logging, sys
from epochfs.sidecar.store import Store
logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(message)s")
Store(sys.argv[1], create=True).close()
"""


def test_two_openers_of_a_missing_index_rebuild_it_once(
        cut_cache: tuple[Path, Path, set[str]], tmp_path: Path) -> None:
    """Two writers (the sampler and the FUSE server of one pod, say) open the cache at once: both
    find the index missing and wait for the reset lock; one rebuilds, the other opens its index."""
    cache, _, objects = cc.copy_cache(cut_cache, tmp_path)
    _delete_index(cache)
    lock = cache / LOCK_NAME
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    procs: list[subprocess.Popen[str]] = []
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        procs = [subprocess.Popen([sys.executable, "-c", OPENER, str(cache)], env=ENV, text=True,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(2)]
        wait_until(lambda: _blocked_on(lock) == 2 or any(p.poll() is not None for p in procs),
                   timeout=60, what="both openers waiting for the reset lock")
        assert _blocked_on(lock) == 2, "an opener did not wait for the reset lock"
    finally:
        os.close(fd)
        errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    log = "".join(errs)
    assert log.count("the index file is missing, so nothing to move aside") == 1, log
    _assert_rebuilt(cache, objects, log)


def test_a_new_cache_without_an_index_is_made_fresh_silently(tmp_path: Path) -> None:
    """The folder a new cache's sampler leaves when killed before its index: ``objects/`` with
    its marker, ``tmp/``, and no ``epochs/``: a new cache, never a rebuild."""
    data = tmp_path / "data"
    data.mkdir()
    for i in range(3):
        (data / f"f{i}.bin").write_bytes(os.urandom(64))
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / OBJECTS_DIR).mkdir()
    (cache / OBJECTS_DIR / f"{MARKER_PREFIX}{os.urandom(16).hex()}").mkdir()
    (cache / "tmp").mkdir()
    r = cc.epochfs("status", "--cache", str(cache))
    assert r.returncode == 2 and "no epochfs cache there (no index.sqlite)" in r.stderr, r.stderr
    with running_sampler(cache, data.as_uri(), "--capacity", "1Mi") as sp:
        wait_until(lambda: cc.samples(cache) == 3, what="the new cache filled")
    log = sp.log_text()
    assert "damaged" not in log and "missing, but" not in log, log[-3000:]
    assert not list(cache.glob(f"{INDEX_NAME}{CORRUPT_INFIX}*"))
