"""Writing one download's body into its temp file: hashed on the way, durable before it returns.

A body is read into one reused buffer (``readinto``) until a block is full, hashed on the way,
and written to the temp file; the file is fsynced before :func:`stream_to_temp` returns, as the
store's contract asks of a file it will admit (DESIGN.md: temp file, fsync, rename, folder fsync).

**Direct writes.** Where the node volume accepts ``O_DIRECT`` (ext4, xfs, tmpfs: nearly all), a
full block goes from the buffer to the disk in one ``write``, past the page cache. A buffered
write copies every byte into page-cache pages, which the kernel then writes back and the fsync
waits for; the copy and the writeback cost CPU that the downloads and the object store share
(measured, 160 x 4 MiB from memory on 32 threads on this 2-core VM: 0.41 s of the process's CPU
buffered, 0.15 s direct, the machine's whole CPU 0.46-0.64 s against 0.19-0.27 s, the same wall
time). Nor do GBs of fetched samples fill the page cache as dirty pages charged to the
sidecar's memory cgroup, where the kernel throttles its writers. A direct write must start and
end on the device's block boundaries from an aligned buffer (:data:`DIRECT_ALIGN`; the
downloader's buffers are page-aligned ``mmap`` memory): a body's last, partial block is written
rounded up to a boundary and the file cut back to its length before the fsync. A volume that
refuses ``O_DIRECT`` at the open (``EINVAL``) is written buffered, as is the rest of any file
whose direct write the kernel refuses (the file's ``O_DIRECT`` cleared), and a body that will be
read back to be checked (a multipart ETag's parts, :mod:`.download`). The price: a sample just
fetched is read from the disk, not from the page cache, the first time a reader opens it.

**Buffered writes** (the fallback) go in :data:`WRITE_PIECE` pieces, each block handed to the
kernel's writeback at once (below).

The fsync is the one wait a download makes on the disk, and it is made in the download's slot:
while it lasts, that slot asks the remote for nothing. Left to itself the kernel writes a file's
dirty pages back only when the fsync asks (or after ``dirty_expire_centisecs``, 30 s), so the
fsync of a 4 MiB body waited for all 4 MiB to reach the disk at the end. Each block written is
therefore handed to the kernel's writeback at once (:func:`start_writeback`,
``sync_file_range(SYNC_FILE_RANGE_WRITE)``: start writing, do not wait): the disk writes while
the rest of the body still arrives, and the fsync waits for about the last block and the
journal's commit. The hint changes no guarantee (the fsync still makes the file durable) and is
skipped where the call does not exist (not Linux) or the file system refuses it.
"""

from __future__ import annotations

import errno
import functools
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from epochfs.sidecar.ratelimit import RateLimiter
from epochfs.sidecar.remote.base import Changed
from epochfs.sidecar.store.digests import Hasher

WRITE_PIECE = 32 << 10
"""Bytes handed to the kernel in one ``write`` of a temp file. A block (1 MiB) read in one go is
written in pieces: one write of 256 pages makes the kernel find and fill them all in one call,
and where free memory is cold (a VM's first touch of its pages) such a call stalls for
milliseconds; a 4 MiB set's times were then bimodal run to run, and 32 KiB pieces kept them
steady. The hash still runs once over the whole block (fewer, larger calls that release the GIL).
"""

DIRECT_ALIGN = 4096
"""The boundary of a direct write's offset, length and buffer: the logical block size of nearly
every disk (512 or 4096 bytes) divides it."""

SYNC_FILE_RANGE_WRITE = 2
"""``sync_file_range``'s flag (linux/fs.h): start writeback of the range's dirty pages, no wait."""


class LocalWriteError(Exception):
    """Writing to the node volume failed (disk full, I/O error): not a remote failure. The sampler
    pauses on a full disk and stops on any other."""


class Cancelled(Exception):
    """The sampler is stopping; the download was abandoned."""


@functools.cache
def _sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """libc's ``sync_file_range``, or None where there is none. ctypes releases the GIL for the
    call, as ``os.write`` does. ctypes is imported here, by the first download's first block
    rather than on the sampler's way to its first request."""
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def start_writeback(fd: int, offset: int, length: int) -> bool:
    """Ask the kernel to start writing ``length`` bytes of ``fd`` at ``offset`` to the disk, without
    waiting. False where it cannot be asked (no such call, or a file system that refuses it, which
    costs one failed call a block): the fsync then writes them all at the end, as without it."""
    fn = _sync_file_range()
    return fn is not None and fn(fd, offset, length, SYNC_FILE_RANGE_WRITE) == 0


def stream_to_temp(readinto: Callable[[memoryview], int], buf: memoryview, temp: Path, h: Hasher,
                   limit: int, *, stop: threading.Event, rate: RateLimiter | None = None,
                   direct: bool = True, opened: tuple[int, bool] | None = None) -> int:
    """Copy a body into the new file ``temp`` through ``buf`` while hashing with ``h`` on the same
    blocks, each full block written direct (``direct``, where ``buf`` and the volume allow it) or
    buffered and handed to writeback at once; fsync before returning the number of bytes.
    ``buf`` for direct writes: page-aligned memory (``mmap``) of a multiple of
    :data:`DIRECT_ALIGN` bytes.

    ``limit`` is the listed size: at most ``limit + 1`` bytes are asked for, and a body that passes
    it raises :class:`~.remote.base.Changed` before its extra bytes are written: a body whose length
    the reader cannot announce (no Content-Length, chunked, a file growing while it is read) would
    otherwise stream to its end onto the node volume, past the one reservation of the listed size.
    A body of the listed size ends with an ask for one byte that finds its end.

    ``opened``: ``temp`` already made by :func:`create_temp` (its fd and whether it writes
    direct), which this call then owns and closes; a file opened direct is written buffered when
    ``direct`` is not asked now.
    """
    size = len(buf)
    total = 0
    direct = direct and size % DIRECT_ALIGN == 0
    if opened is None:
        fd, direct, _ = create_temp(temp, direct=direct)
    else:
        fd, was_direct = opened
        if was_direct and not direct:
            try:
                _clear_direct(fd)
            except BaseException:
                os.close(fd)
                raise
        direct = was_direct and direct
    opened_direct = direct
    try:
        while True:
            if stop.is_set():
                raise Cancelled()
            want = limit + 1 - total
            filled, ended = _fill(readinto, buf[:size if want >= size else want], total, limit, h,
                                  stop=stop, rate=rate)
            if filled:
                direct = _write_block(fd, buf, filled, total, temp, direct=direct)
                if not direct:
                    start_writeback(fd, total, filled)
                total += filled
            if ended:
                break
        try:
            if opened_direct and os.fstat(fd).st_size != total:
                os.ftruncate(fd, total)  # the last block was written rounded up to a boundary
            os.fsync(fd)
        except OSError as e:
            raise LocalWriteError(f"fsync {temp}: {e}") from e
    finally:
        os.close(fd)
    return total


class Opened(NamedTuple):
    """A temp file made by :func:`create_temp`."""

    fd: int
    direct: bool
    """Whether it writes direct."""
    inode: tuple[int, int]
    """Its (device, inode), read through ``fd``: the file the store installs must be this one,
    not whatever another process renamed to its name since (:mod:`.store.fanout`)."""


def create_temp(temp: Path, *, direct: bool) -> Opened:
    """Create ``temp`` for writing, ``O_DIRECT`` where asked and the file system accepts it. The
    downloader creates it before it asks the remote for the body: a volume that can take no file
    (no inode, read-only) refuses it without a request."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    fd = -1
    if direct:
        try:
            fd = os.open(temp, flags | os.O_DIRECT, 0o600)
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise LocalWriteError(f"cannot create {temp}: {e}") from e
            # A file system without O_DIRECT may have created the file before refusing the flag.
            temp.unlink(missing_ok=True)
    try:
        if fd < 0:
            fd, direct = os.open(temp, flags, 0o600), False
        st = os.fstat(fd)
    except OSError as e:
        if fd >= 0:
            os.close(fd)
        raise LocalWriteError(f"cannot create {temp}: {e}") from e
    return Opened(fd, direct, (st.st_dev, st.st_ino))


def _fill(readinto: Callable[[memoryview], int], block: memoryview, before: int, limit: int,
          h: Hasher, *, stop: threading.Event, rate: RateLimiter | None) -> tuple[int, bool]:
    """Read into ``block`` until it is full or the body ends, hashing each piece read; the bytes
    read and whether the body ended. ``before``: the body's bytes already written."""
    filled = 0
    while filled < len(block):
        n = readinto(block[filled:])
        if not n:
            return filled, True
        if before + filled + n > limit:
            raise Changed(f"body longer than the listed {limit} bytes")
        if rate is not None and not rate.take(n, stop):
            raise Cancelled()
        h.update(block[filled:filled + n])
        filled += n
        if stop.is_set():
            raise Cancelled()
    return filled, False


def _write_block(fd: int, buf: memoryview, n: int, at: int, temp: Path, *, direct: bool) -> bool:
    """Write ``buf[:n]`` at offset ``at``: direct, rounded up to :data:`DIRECT_ALIGN` (only a
    body's last block is partial; the caller cuts the file back), or buffered in pieces.
    Whether the file still writes direct: a direct write the kernel refuses (``EINVAL``: a buffer
    or a device it cannot align; ``ENOSPC`` for a rounded-up block) clears the file's
    ``O_DIRECT``, and the rest goes buffered."""
    done = 0
    try:
        if direct:
            length = -(-n // DIRECT_ALIGN) * DIRECT_ALIGN
            try:
                while done < length:
                    done += os.pwrite(fd, buf[done:length], at + done)
                return True
            except OSError as e:
                # ENOSPC on a rounded-up last block: the padding may not fit where the body does
                # (a volume of 1 KiB blocks within 3 KiB of full); the body's own bytes may.
                if e.errno != errno.EINVAL and not (e.errno == errno.ENOSPC and length > n):
                    raise
                _clear_direct(fd)
                direct = False
        while done < n:
            done += os.pwrite(fd, buf[done:min(n, done + WRITE_PIECE)], at + done)
    except OSError as e:
        raise LocalWriteError(f"writing {temp}: {e}") from e
    return direct


def _clear_direct(fd: int) -> None:
    import fcntl  # the fallback's only: not on the sampler's way to its first download

    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_DIRECT)


__all__ = ["DIRECT_ALIGN", "WRITE_PIECE", "Cancelled", "LocalWriteError", "Opened", "create_temp",
           "start_writeback", "stream_to_temp"]
