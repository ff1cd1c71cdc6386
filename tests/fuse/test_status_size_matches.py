"""A reader's fstat of ``.epochfs/status.json`` gives the size of the bytes its open reads.

status.json is rendered afresh for each open, and its length moves with the time and the
counters. Before, the size the kernel gave a stat or fstat was another document's (the refresher's
snapshot, cached by the kernel): 35 of 40 opens disagreed, and ``tar`` (what ``kubectl cp`` runs)
said "File shrank by 1 byte; padding with zeros" and archived NUL-padded, invalid JSON. Now the
open drops the kernel's cached attributes of the file and the server answers a stat from the open,
so a reader that opens, fstats and reads exactly that many bytes (tar, node's readFileSync) gets
the whole document. Through a real mount, both libfuse APIs; the store's counters change between
the opens so that documents of other lengths come one after another.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from fuse_helpers import admit, make_objects, mounted, open_store

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]

ROUNDS = 40


def _open_fstat_read(path: Path) -> tuple[int, bytes]:
    """What tar does: open, fstat, then read (here to the end, to see every byte the open has)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return size, b"".join(chunks)
    finally:
        os.close(fd)


@pytest.mark.parametrize("api", ["lowlevel", "highlevel"])
def test_fstat_after_open_sizes_the_document_read(tmp_path: Path, api: str) -> None:
    cache = tmp_path / "cache"
    store = open_store(cache)
    admit(store, make_objects(9, 10))
    with mounted(cache, tmp_path / "mnt", args=("--fuse-api", api)) as m:
        status = m.path / ".epochfs" / "status.json"
        os.stat(status)  # the kernel caches a size (the snapshot's) from here on
        wrong = []
        for i in range(ROUNDS):
            admit(store, make_objects(1, 10 ** (1 + i % 4), start=100 + i))  # counters of other widths
            size, data = _open_fstat_read(status)
            json.loads(data)
            if size != len(data):
                wrong.append((i, size, len(data)))
        assert not wrong, f"{len(wrong)} of {ROUNDS} opens: fstat size != bytes read, e.g. {wrong[:3]}"
    store.close()


@pytest.mark.skipif(shutil.which("tar") is None, reason="needs tar")
@pytest.mark.parametrize("api", ["lowlevel", "highlevel"])
def test_tar_archives_status_json_whole(tmp_path: Path, api: str) -> None:
    cache = tmp_path / "cache"
    store = open_store(cache)
    admit(store, make_objects(9, 10))
    with mounted(cache, tmp_path / "mnt", args=("--fuse-api", api)) as m:
        os.listdir(m.path / ".epochfs")  # a listing caches every entry's size in the kernel
        for i in range(ROUNDS // 4):
            admit(store, make_objects(1, 10 ** (1 + i % 4), start=100 + i))
            archive = tmp_path / f"s{i}.tar"
            tar = subprocess.run(["tar", "cf", str(archive), "-C", str(m.path), ".epochfs/status.json"],
                                 capture_output=True, text=True, timeout=60)
            assert tar.returncode == 0 and not tar.stderr, tar.stderr
            with tarfile.open(archive) as t:
                member = t.extractfile(".epochfs/status.json")
                assert member is not None
                text = member.read()
            assert b"\0" not in text and text.rstrip().endswith(b"}") and text.endswith(b"\n"), text[-40:]
            assert json.loads(text)["samples"] == 10 + i
    store.close()
