"""Each reader's fstat of an open ``.epochfs/status.json`` gives the size of its own open's document.

status.json is rendered afresh for each open (its ``time`` and counters move, so its length did),
and two readers may hold it open at once. Linux's fstat names no open (FUSE getattr comes without
a handle), so the server answers with the newest open's size: a reader that opened, fstat'ed and
read that many bytes got another reader's size, and ``tar`` beside a poller archived NUL-padded,
invalid JSON ("File shrank by 1 byte; padding with zeros"; review E53: 549 of 2,400 checks wrong,
both APIs). Now every document is served padded with spaces to a multiple of
``fuse.viewstate.STATUS_BLOCK``, so overlapping opens have one size (readers in another container,
which the server cannot tell apart, included). Through a real mount, each libfuse API.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fuse_helpers import admit, make_objects, mounted, open_store

from epochfs.fuse.viewstate import STATUS_BLOCK

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]

TAR_RUNS = 60
POLLS_MAX = 200_000
"""The poller's opens at most (it stops as soon as the tar runs are done)."""


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _fstat_size(fd: int) -> int:
    return os.fstat(fd).st_size


@pytest.mark.parametrize("api", ["lowlevel", "highlevel"])
def test_two_open_handles_each_fstat_their_own_document(tmp_path: Path, api: str) -> None:
    cache = tmp_path / "cache"
    store = open_store(cache)
    admit(store, make_objects(3, 10))
    # One thread per reader: everything submitted to a one-worker pool runs in its one thread.
    a, b = ThreadPoolExecutor(1), ThreadPoolExecutor(1)
    try:
        with mounted(cache, tmp_path / "mnt", args=("--fuse-api", api)) as m:
            status = m.path / ".epochfs" / "status.json"
            fd_a = a.submit(os.open, status, os.O_RDONLY).result()
            # Counters ten digits wider: B's document is longer than A's, whatever the clock adds.
            admit(store, make_objects(1, 10 ** 6, start=50))
            fd_b = b.submit(os.open, status, os.O_RDONLY).result()
            try:
                sizes = []  # each handle fstat'ed after the other's, so a cached size would show
                for ex, fd in ((b, fd_b), (a, fd_a), (b, fd_b), (a, fd_a)):
                    sizes.append(ex.submit(_fstat_size, fd).result())
                for ex, fd in ((b, fd_b), (a, fd_a)):  # a listing between: its size not kept
                    os.listdir(status.parent)
                    sizes.append(ex.submit(_fstat_size, fd).result())
                data_a = a.submit(_read_all, fd_a).result()
                data_b = b.submit(_read_all, fd_b).result()
            finally:
                a.submit(os.close, fd_a).result()
                b.submit(os.close, fd_b).result()
            doc_a, doc_b = json.loads(data_a), json.loads(data_b)
            assert doc_a["cache_bytes"] != doc_b["cache_bytes"], "the two opens must hold other documents"
            assert len(json.dumps(doc_b)) > len(json.dumps(doc_a))  # unpadded, B's is the longer
            assert len(data_a) % STATUS_BLOCK == 0, len(data_a)
            assert sizes == [len(data_b), len(data_a)] * 3, (
                f"fstat B, A, B, A, ls+B, ls+A gave {sizes}; A's document is {len(data_a)} bytes, "
                f"B's {len(data_b)}")
    finally:
        a.shutdown()
        b.shutdown()
        store.close()


def _poll(status: Path, done: threading.Event, errors: list[str]) -> int:
    """Open, fstat and read status.json until ``done`` (at most POLLS_MAX times); the opens."""
    n = 0
    while n < POLLS_MAX and not done.is_set():
        n += 1
        fd = os.open(status, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            data = _read_all(fd)
        finally:
            os.close(fd)
        if size != len(data):
            errors.append(f"poller: fstat {size}, read {len(data)}")
    return n


@pytest.mark.skipif(shutil.which("tar") is None, reason="needs tar")
@pytest.mark.parametrize("api", ["lowlevel", "highlevel"])
def test_tar_beside_a_poller_archives_valid_json(tmp_path: Path, api: str) -> None:
    cache = tmp_path / "cache"
    store = open_store(cache)
    admit(store, make_objects(9, 10))
    done = threading.Event()
    poll_errors: list[str] = []
    bad = []
    with mounted(cache, tmp_path / "mnt", args=("--fuse-api", api)) as m, ThreadPoolExecutor(1) as ex:
        status = m.path / ".epochfs" / "status.json"
        poller = ex.submit(_poll, status, done, poll_errors)
        try:
            for i in range(TAR_RUNS):
                archive = tmp_path / f"s{i}.tar"
                tar = subprocess.run(["tar", "cf", str(archive), "-C", str(m.path), ".epochfs/status.json"],
                                     capture_output=True, text=True, timeout=60)
                with tarfile.open(archive) as t:
                    member = t.extractfile(".epochfs/status.json")
                    assert member is not None
                    text = member.read()
                try:
                    json.loads(text)
                    valid = b"\0" not in text and text.rstrip().endswith(b"}") and text.endswith(b"\n")
                except ValueError:
                    valid = False
                if tar.returncode != 0 or tar.stderr or not valid:
                    bad.append((i, tar.stderr.strip(), text[-30:]))
        finally:
            done.set()
            polls = poller.result()
    store.close()
    assert polls > 0
    assert not bad, f"{len(bad)} of {TAR_RUNS} tar runs beside {polls} opens went wrong, e.g. {bad[:3]}"
    assert not poll_errors, poll_errors[:3]
