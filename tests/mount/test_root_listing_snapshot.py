"""A listing of the root is one snapshot per opened folder handle (issue 20, item 5): the root
changes as epochs are cut and retire, and a reader's listing takes several readdir calls, each
from an offset. Recomputed at each call, a cut between two calls showed ``latest`` twice (5 of
88,757 listings under a cut storm); here a reader reads the root a few entries per ``getdents64``
and a cut lands between two calls, at every point of the listing."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import admit, make_objects, mounted, open_store

_libc = ctypes.CDLL(None, use_errno=True)
SYS_GETDENTS64 = {"x86_64": 217, "aarch64": 61}.get(os.uname().machine)


def _names(buf: bytes) -> list[str]:
    out, pos = [], 0
    while pos < len(buf):
        reclen = int.from_bytes(buf[pos + 16:pos + 18], "little")
        name = buf[pos + 19:pos + reclen].split(b"\0", 1)[0].decode()
        out.append(name)
        pos += reclen
    return out


@pytest.mark.skipif(SYS_GETDENTS64 is None, reason="getdents64's number on this machine")
def test_a_cut_between_two_readdir_calls_shows_no_entry_twice(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    store = open_store(cache, keep_epochs=100)
    admit(store, make_objects(5, 100))
    store.cut(0)
    with mounted(cache, tmp_path / "mnt") as m:
        # A cut after the reader's 1st, 2nd... call, or after the call that returned "latest"
        # (then the call that would say "end of folder" gave "latest" again).
        for cut_after in (1, 2, 3, 4, "latest"):
            fd = os.open(m.path, os.O_RDONLY | os.O_DIRECTORY)
            try:
                buf = ctypes.create_string_buffer(48)  # one or two entries a call
                seen: list[str] = []
                calls, cut = 0, False
                while True:
                    n = _libc.syscall(SYS_GETDENTS64, fd, buf, len(buf))
                    assert n >= 0, os.strerror(ctypes.get_errno())
                    if n == 0:
                        break
                    seen += _names(buf.raw[:n])
                    calls += 1
                    if not cut and (calls == cut_after or (cut_after == "latest" and "latest" in seen)):
                        cut = True
                        epoch = store.newest_epoch() + 1
                        store.cut(epoch, force=True)
                        wait_until(lambda e=epoch: os.path.isdir(m.path / f"epoch-{e}"),
                                   what=f"epoch-{epoch} in the view")
            finally:
                os.close(fd)
            assert cut and len(seen) == len(set(seen)), f"an entry twice (cut after {cut_after}): {seen}"
            assert {".", "..", ".epochfs", "latest"} <= set(seen)
    store.close()
