"""fstat and mmap of an open manifest go on once its epoch retires, as its reads do.

A reader opens ``.epochfs/epoch-N.manifest`` and, before reading it, the epoch retires. The kernel
asks for the file's attributes for an ``fstat`` (and for ``mmap``, which sizes the file by fstat)
*without* the open file's handle, so the server answered from the namespace, where the name is
gone: ENOENT, and mmap failed, while read went on. Now the low-level adapter answers an inode an
open handle still holds from that open, and the kernel is told to forget the name, so a stat *by
name* is a lookup and still answers ENOENT. Through a real mount.

The high-level API asks by name for both (libfuse turns a lookup and a getattr into the same
``getattr(path)`` call), so there one of the two must be wrong: the name stays gone, and an
fstat before the first read answers ENOENT (a read asks with the handle, and after it fstat
answers from what it cached, ``tests/mount/test_open_manifest_retire.py``).
"""

from __future__ import annotations

import mmap
import os
import time
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import admit, errno_of, make_objects, mounted, open_store

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]

FAR = 10**7
"""Seconds ahead the retirement's clock is set: every in-use window has run out by then."""


@pytest.mark.parametrize("api", [
    "lowlevel",
    pytest.param("highlevel", marks=pytest.mark.xfail(
        strict=True, raises=FileNotFoundError,
        reason="libfuse's high-level API asks by name for a stat and an fstat alike")),
])
def test_fstat_and_mmap_of_an_open_manifest_go_on_after_its_epoch_retires(tmp_path: Path, api: str) -> None:
    cache = tmp_path / "cache"
    store = open_store(cache, keep_epochs=1)
    admit(store, make_objects(300, 10))
    assert store.cut(0) == 0 and store.cut(1) == 1
    with mounted(cache, tmp_path / "mnt", args=("--fuse-api", api)) as m:
        manifest = m.path / ".epochfs" / "epoch-0.manifest"
        whole = manifest.read_bytes()
        fd = os.open(manifest, os.O_RDONLY)
        try:
            assert os.fstat(fd).st_size == len(whole)
            assert store.retire(now=time.time() + FAR) == [0]
            wait_until(lambda: errno_of(lambda: os.stat(manifest)) is not None,
                       what="epoch-0's manifest gone from the mount by name")
            assert "epoch-0.manifest" not in os.listdir(m.path / ".epochfs")
            assert os.fstat(fd).st_size == len(whole), "fstat of the open manifest"
            with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as mapped:
                assert mapped[:] == whole, "mmap of the open manifest"
            assert os.pread(fd, len(whole) + 10, 0) == whole
            assert os.fstat(fd).st_size == len(whole)
            assert errno_of(lambda: os.stat(manifest)) is not None, "the name stays gone while open"
        finally:
            os.close(fd)
        assert (m.path / ".epochfs" / "epoch-1.manifest").read_bytes().startswith(b"#epochfs-manifest v1")
    store.close()
