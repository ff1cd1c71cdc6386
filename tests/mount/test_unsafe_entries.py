"""Rows of an epoch's file list that the mount cannot show safely are left out, counted and logged.

The index (or a members file read while it is damaged) is input like any other: a row whose
sample id would make its symlink point outside the link root (``..``, ``/``), or whose path or
checksum holds a tab or newline (the manifest's separators), must never be served. The first
would hand readers a file outside the cache; the others made the manifest fail (EIO) for the
whole epoch. Here such rows are written into a real index and the epoch is read through a real
mount (both APIs).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from fuse_helpers import admit, errno_of, make_objects, mounted, open_store, sid_of

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]


@pytest.mark.parametrize("api", ["lowlevel", "highlevel"])
def test_rows_that_would_escape_the_link_root_or_break_the_manifest_are_not_shown(
        tmp_path: Path, api: str) -> None:
    cache = tmp_path / "cache"
    store = open_store(cache)
    objects = make_objects(8, 50)
    admit(store, objects)
    keys = sorted(objects)
    escaping, tabbed, garbled = keys[2], keys[5], keys[6]
    db = sqlite3.connect(cache / "index.sqlite")
    with db:
        db.execute("UPDATE samples SET sid=? WHERE key=?", ("../../../../../../../../etc/passwd", escaping))
        db.execute("UPDATE samples SET path=? WHERE key=?", (tabbed + "\tx", tabbed))
        db.execute("UPDATE samples SET checksum=? WHERE key=?", ("md5:0\n" + "0" * 31, garbled))
    db.close()
    assert store.cut(0) == 0
    with mounted(cache, tmp_path / "mnt", args=("--fuse-api", api)) as m:
        epoch = m.path / "epoch-0"
        shown = sorted(f"train/{name}" for name in os.listdir(epoch / "train"))
        assert shown == [k for k in keys if k not in (escaping, tabbed, garbled)]
        assert errno_of(lambda: os.lstat(epoch / escaping)) == 2
        for key in shown:
            target = os.readlink(epoch / key)
            assert os.path.normpath(target).startswith(str(cache / "objects-ro") + "/"), target
            assert (epoch / key).read_bytes() == objects[key]
        manifest = (m.path / ".epochfs" / "epoch-0.manifest").read_text()
        assert [line.split("\t")[0] for line in manifest.splitlines()[1:]] == shown
        assert manifest.startswith(f"#epochfs-manifest v1\tepoch=0\tfiles={len(shown)}\t")
        log = m.log_text()
        assert "unsafe link target" in log and "3 of 8 file(s) not shown" in log
        assert "Traceback" not in log
    assert sid_of(escaping) != "../../../../../../../../etc/passwd"
    store.close()
