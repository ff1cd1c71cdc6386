"""Bodies are written to their temp files past the page cache (``O_DIRECT``) where the volume
allows it (sidecar/tempwrite.py): full blocks from the downloader's page-aligned buffer, a
body's last partial block rounded up to a boundary and the file cut back to the body's length.

All against the real kernel on the test's own disk: bodies of every awkward size land byte for
byte whatever pieces the reader hands over; the real :class:`Downloader` fetching through the
``file://`` remote under the real ``strace`` opens its temp file ``O_DIRECT`` and writes aligned
blocks; a real FUSE volume that refuses ``O_DIRECT`` (tests/refusing_fs.py) and a buffer the
kernel cannot align are written buffered, byte for byte.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import mmap
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import wait_until
from refusing_fs import REFUSED, refusing_mount
from sampler_helpers import index_rows
from traced_download import traced_download

from epochfs.sidecar import tempwrite
from epochfs.sidecar.remote.base import Changed
from epochfs.sidecar.store.digests import new_hasher

BLOCK = 1 << 20
SIZES = [0, 1, 4095, 4096, 4097, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 12_345]


def _buffer() -> memoryview:
    return memoryview(mmap.mmap(-1, BLOCK))


class Trickle(io.RawIOBase):
    """A body handed over at most ``most`` bytes a call, as a socket does."""

    def __init__(self, body: bytes, most: int) -> None:
        self.src, self.most = io.BytesIO(body), most

    def readinto(self, b: memoryview) -> int:  # type: ignore[override]
        return self.src.readinto(b[:self.most])


def _write(body: bytes, temp: Path, *, most: int, buf: memoryview | None = None, direct: bool = True) -> int:
    h = new_hasher("crc64nvme")
    n = tempwrite.stream_to_temp(Trickle(body, most).readinto, buf if buf is not None else _buffer(),
                                 temp, h, len(body), stop=threading.Event(), direct=direct)
    return n


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("most", [BLOCK, 1000, 65_536])
def test_a_body_of_any_size_lands_byte_for_byte(tmp_path: Path, size: int, most: int) -> None:
    body = os.urandom(size)
    temp = tmp_path / "t.part"
    assert _write(body, temp, most=most) == size
    assert temp.stat().st_size == size  # the rounded-up last block cut back
    assert temp.read_bytes() == body


def test_a_body_longer_than_listed_is_refused_before_its_extra_bytes(tmp_path: Path) -> None:
    body = os.urandom(BLOCK + 10)
    temp = tmp_path / "t.part"
    with pytest.raises(Changed):
        tempwrite.stream_to_temp(Trickle(body, 4096).readinto, _buffer(), temp, new_hasher("crc64nvme"),
                                 BLOCK, stop=threading.Event())
    assert temp.stat().st_size <= BLOCK


def test_the_downloader_writes_direct_in_aligned_blocks(tmp_path: Path) -> None:
    """What the kernel is asked, seen by strace: the temp file opened ``O_DIRECT``, four 1 MiB
    writes and the 100-byte tail written as one 4 KiB block, the file cut back to its length,
    then the fsync; no writeback hint (a direct write leaves no dirty page)."""
    size = 4 * BLOCK + 100
    body = os.urandom(size)
    traced = traced_download(tmp_path, body, "pwrite64,ftruncate,fsync,sync_file_range", direct=True)
    assert hashlib.sha256(traced.temp.read_bytes()).digest() == hashlib.sha256(body).digest()
    assert "O_DIRECT" in traced.flags, traced.flags
    fd, lines = traced.fd, traced.lines
    calls = [m.group(1) for line in lines if (m := re.match(rf"(\w+)\({fd}\b", line))]
    writes = [(int(m.group(1)), int(m.group(2))) for line in lines
              if (m := re.match(rf"pwrite64\({fd}, .*, (\d+), (\d+)\)\s+= \d+$", line))]
    assert writes == [(BLOCK, 0), (BLOCK, BLOCK), (BLOCK, 2 * BLOCK), (BLOCK, 3 * BLOCK), (4096, 4 * BLOCK)]
    assert calls == ["pwrite64"] * 5 + ["ftruncate", "fsync"], calls
    assert any(re.match(rf"ftruncate\({fd}, {size}\)\s+= 0$", line) for line in lines)


def test_a_volume_that_refuses_direct_writes_gets_them_buffered(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    with refusing_mount(source, tmp_path / "mnt") as mnt:
        for size in (BLOCK + 7, 4096):
            body = os.urandom(size)
            temp = mnt / f"t{size}.part"
            assert _write(body, temp, most=65_536) == size
            assert temp.read_bytes() == body
        refused = (source / REFUSED).read_text().split()
    assert refused == [f"/t{BLOCK + 7}.part", "/t4096.part"]  # each asked direct once, then buffered


def test_a_buffer_the_kernel_cannot_align_is_written_buffered(tmp_path: Path) -> None:
    """A buffer one byte off a page: the kernel refuses the direct write (EINVAL), the file's
    ``O_DIRECT`` is cleared and the same block written buffered."""
    backing = mmap.mmap(-1, BLOCK + 4096)
    buf = memoryview(backing)[1:BLOCK + 1]
    body = os.urandom(2 * BLOCK + 33)
    temp = tmp_path / "t.part"
    assert _write(body, temp, most=BLOCK, buf=buf) == len(body)
    assert temp.read_bytes() == body
    buf.release()
    backing.close()


def test_direct_false_writes_buffered(tmp_path: Path) -> None:
    """``direct=False`` never opens the file ``O_DIRECT`` (the flag is the file's own)."""
    body = os.urandom(BLOCK + 5)
    temp = tmp_path / "t.part"
    flags: list[int] = []
    real_fsync = os.fsync

    def seen(fd: int) -> None:
        import fcntl

        flags.append(fcntl.fcntl(fd, fcntl.F_GETFL))
        real_fsync(fd)

    mp = pytest.MonkeyPatch()
    mp.setattr(os, "fsync", seen)
    try:
        _write(body, temp, most=BLOCK, direct=False)
        _write(body, tmp_path / "u.part", most=BLOCK)
    finally:
        mp.undo()
    assert temp.read_bytes() == body
    assert [bool(f & os.O_DIRECT) for f in flags] == [False, True]


@pytest.fixture
def small_blocks(tmp_path: Path) -> Iterator[Path]:
    """A real 8 MiB ext4 volume of 1 KiB blocks (mkfs.ext4's choice for small volumes), loop
    mounted for the test and always unmounted."""
    image, mnt = tmp_path / "vol.img", tmp_path / "vol"
    with open(image, "wb") as f:
        f.truncate(8 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-b", "1024", "-m", "0", str(image)], check=True)
    mnt.mkdir()
    subprocess.run(["mount", "-o", "loop", str(image), str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_a_last_block_whose_padding_does_not_fit_is_written_buffered(small_blocks: Path) -> None:
    """Within 3 KiB of full on a volume of 1 KiB blocks, a 1,025-byte body fits (two blocks) but
    its last block rounded up to 4 KiB does not: the direct write's ENOSPC sends the body's own
    bytes buffered, not a full disk to the sampler."""
    filler = small_blocks / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    with contextlib.suppress(OSError):  # until the volume is full
        while True:
            os.write(fd, b"\1" * 1024)
    os.close(fd)
    os.truncate(filler, filler.stat().st_size - 2048)
    os.sync()
    assert os.statvfs(small_blocks).f_bavail * os.statvfs(small_blocks).f_frsize < 4096
    body = os.urandom(1025)
    temp = small_blocks / "t.part"
    assert _write(body, temp, most=BLOCK) == len(body)
    assert temp.read_bytes() == body


@pytest.mark.parametrize(("args", "direct"), [((), True), (("--direct-writes", "0"), False)])
def test_the_sampler_writes_direct_unless_told_not_to(tmp_path: Path, args: tuple[str, ...],
                                                       direct: bool) -> None:
    """``epochfs sample`` itself, under strace: its temp files opened ``O_DIRECT`` by default, and
    without it with ``--direct-writes 0`` (the operator's choice: a first read from the page cache)."""
    strace = shutil.which("strace")
    assert strace is not None, "strace is a test dependency (Makefile APT_PACKAGES)"
    data, cache, log = tmp_path / "data", tmp_path / "cache", tmp_path / "strace"
    data.mkdir()
    for i in range(3):
        (data / f"{i}.bin").write_bytes(os.urandom(200_000 + i))
    epochfs = str(Path(sys.executable).parent / "epochfs")
    proc = subprocess.Popen([strace, "-f", "-qq", "-e", "trace=openat", "-o", str(log), epochfs, "sample",
                             "--remote", f"file://{data}", "--cache", str(cache), "--capacity", "64Mi",
                             *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def admitted() -> int:
        try:
            return int(index_rows(cache, "SELECT COUNT(*) FROM samples")[0][0])
        except sqlite3.Error:  # no index yet, or its schema not yet made
            return 0

    try:
        wait_until(lambda: admitted() == 3, what="3 samples admitted")
    finally:
        # The sampler is strace's child: stopped, it ends strace with it.
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                  text=True).stdout.split()
        for pid in children:
            os.kill(int(pid), signal.SIGTERM)
        if not children:
            proc.kill()
        proc.wait(timeout=60)
    temps = [line for line in log.read_text().splitlines() if re.search(r'\.part", O_WRONLY\|O_CREAT', line)]
    assert len(temps) == 3, temps
    assert all(("O_DIRECT" in line) == direct for line in temps), temps
