"""A control file opened before its epoch retires reads whole: the bytes of the open.

A reader opens ``.epochfs/epoch-N.manifest`` and reads it in pieces; the epoch retires between two
reads (the view refreshes, the kernel is told the manifest's inode is gone). The kernel asks for
the file's size again before a read (the cached attributes were dropped), and it asks with the
open file's handle: the answer must come from what the open took, not from the namespace, where
the name is gone (ENOENT half-way through the file, before). Through a real mount, both APIs.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import admit, make_objects, mounted, open_store

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]

FAR = 10**7
"""Seconds ahead the retirement's clock is set: every in-use window has run out by then."""


@pytest.mark.parametrize("api", ["lowlevel", "highlevel"])
def test_a_manifest_open_across_its_epochs_retirement_reads_whole(tmp_path: Path, api: str) -> None:
    cache = tmp_path / "cache"
    store = open_store(cache, keep_epochs=1)
    admit(store, make_objects(50, 10))
    assert store.cut(0) == 0 and store.cut(1) == 1
    with mounted(cache, tmp_path / "mnt", args=("--fuse-api", api)) as m:
        manifest = m.path / ".epochfs" / "epoch-0.manifest"
        whole = manifest.read_bytes()
        with open(manifest, "rb", buffering=0) as f:
            head = f.read(100)
            assert store.retire(now=time.time() + FAR) == [0]
            wait_until(lambda: not manifest.exists(), what="epoch-0's manifest gone from the mount")
            rest = f.read()
            assert os.fstat(f.fileno()).st_size == len(whole)
        assert head + rest == whole
        assert (m.path / ".epochfs" / "epoch-1.manifest").read_bytes().startswith(b"#epochfs-manifest v1")
    store.close()
