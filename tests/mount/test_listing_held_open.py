"""A folder listing held open reads the snapshot it began with, until the handle is released.

A reader lists a folder in several ``getdents64`` calls, each from an offset. Whatever happens
between two calls (the epoch retires and the view refreshes, a cut changes the root), the calls of
one handle must read one listing: no name twice, none missing, no error half-way. Here the reader
takes a few entries per call through a real mount, with both libfuse APIs, and the change lands
between two of its calls.
"""

from __future__ import annotations

import ctypes
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

_libc = ctypes.CDLL(None, use_errno=True)
SYS_GETDENTS64 = {"x86_64": 217, "aarch64": 61}.get(os.uname().machine)
FAR = 10**7
"""Seconds ahead the retirement's clock is set: every in-use window has run out by then."""


def _names(buf: bytes) -> list[str]:
    out, pos = [], 0
    while pos < len(buf):
        reclen = int.from_bytes(buf[pos + 16:pos + 18], "little")
        out.append(buf[pos + 19:pos + reclen].split(b"\0", 1)[0].decode())
        pos += reclen
    return out


def _getdents(fd: int, size: int = 64) -> list[str]:
    buf = ctypes.create_string_buffer(size)
    n = _libc.syscall(SYS_GETDENTS64, fd, buf, len(buf))
    if n < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return _names(buf.raw[:n])


def _rest(fd: int) -> list[str]:
    out: list[str] = []
    while batch := _getdents(fd):
        out += batch
    return out


@pytest.mark.skipif(SYS_GETDENTS64 is None, reason="getdents64's number on this machine")
@pytest.mark.parametrize("api", ["lowlevel", "highlevel"])
def test_an_epoch_folder_listed_while_its_epoch_retires_lists_whole(tmp_path: Path, api: str) -> None:
    cache = tmp_path / "cache"
    store = open_store(cache, keep_epochs=1)
    objects = make_objects(40, 10)
    admit(store, objects)
    assert store.cut(0) == 0 and store.cut(1) == 1
    expected = sorted(k.split("/")[1] for k in objects)
    with mounted(cache, tmp_path / "mnt", args=("--fuse-api", api)) as m:
        folder = m.path / "epoch-0" / "train"
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            seen = _getdents(fd)
            assert 0 < len(seen) < len(expected), seen
            assert store.retire(now=time.time() + FAR) == [0]
            wait_until(lambda: "epoch-0" not in os.listdir(m.path), what="epoch-0 gone from the root")
            seen += _rest(fd)
        finally:
            os.close(fd)
        assert sorted(n for n in seen if n not in (".", "..")) == expected
        assert len(seen) == len(set(seen)), seen
    store.close()
