"""A sample lost while the kernel holds its entry: the next ``stat`` shows the regular file the
view answers now, not an I/O error.

The kernel caches each entry of an epoch (readdir-plus, long timeouts) as a symlink. When its
sample is lost the view shows the entry as a regular file (:mod:`epochfs.fuse.lost`); dropping
only the inode's attributes leaves the kernel's dentry on an inode of the old type, and the
kernel answers the fresh attributes' other file type with EIO (and marks the inode bad). The
refresher must drop the entry itself (``fuse_lowlevel_notify_inval_entry``), so the next lookup
reaches the server. Through a real mount with the low-level API, which knows the parent's number.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import admit, errno_of, make_objects, mounted, open_store
from lost_helpers import make_lost

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]


def test_a_lost_entry_the_kernel_held_as_a_symlink_stats_as_a_file(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    store = open_store(cache, keep_epochs=2)
    objects = make_objects(10, 700, seed=3)
    admit(store, objects)
    assert store.cut(0) == 0
    lost = sorted(objects)[4]
    with mounted(cache, tmp_path / "mnt", args=("--fuse-api", "lowlevel")) as m:
        entry = m.path / "epoch-0" / lost
        assert stat.S_ISLNK(os.lstat(entry).st_mode)
        target = os.readlink(entry)  # the kernel keeps the target (FUSE_CAP_CACHE_SYMLINKS)
        make_lost(store, lost)
        # The refresher told the kernel: the cached target is gone, so readlink reaches the server.
        wait_until(lambda: errno_of(lambda: os.readlink(entry) == target) is not None, timeout=20,
                   what="the kernel's cached symlink dropped")
        st = os.lstat(entry)  # before: EIO (an inode of the old type, fresh attributes of another)
        assert stat.S_ISREG(st.st_mode) and st.st_size == len(objects[lost])
        assert errno_of(entry.read_bytes) == errno.EIO
        others = [k for k in sorted(objects) if k != lost]
        assert all((m.path / "epoch-0" / k).read_bytes() == objects[k] for k in others)
    store.close()
