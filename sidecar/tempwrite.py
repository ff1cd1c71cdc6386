"""Writing one download's body into its temp file: hashed on the way, durable before it returns.

A body is read block by block into one reused buffer (``readinto``), hashed on that block, and
written to the temp file in :data:`WRITE_PIECE` pieces; the file is fsynced before
:func:`stream_to_temp` returns, as the store's contract asks of a file it will admit (DESIGN.md:
temp file, fsync, rename, folder fsync).

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

import functools
import os
import threading
from collections.abc import Callable
from pathlib import Path

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
                   limit: int, *, stop: threading.Event, rate: RateLimiter | None = None) -> int:
    """Copy a body into the new file ``temp`` through ``buf`` while hashing with ``h`` on the same
    blocks; each block's pages go to writeback as soon as they are written; fsync before returning
    the number of bytes.

    ``limit`` is the listed size: at most ``limit + 1`` bytes are asked for, and a body that passes
    it raises :class:`~.remote.base.Changed` before its extra bytes are written: a body whose length
    the reader cannot announce (no Content-Length, chunked, a file growing while it is read) would
    otherwise stream to its end onto the node volume, past the one reservation of the listed size.
    A body of the listed size ends with an ask for one byte that finds its end.
    """
    size = len(buf)
    total = 0
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except OSError as e:
        raise LocalWriteError(f"cannot create {temp}: {e}") from e
    try:
        while True:
            if stop.is_set():
                raise Cancelled()
            want = limit + 1 - total
            n = readinto(buf if want >= size else buf[:want])
            if not n:
                break
            chunk = buf[:n]
            if total + n > limit:
                raise Changed(f"body longer than the listed {limit} bytes")
            if rate is not None and not rate.take(n, stop):
                raise Cancelled()
            h.update(chunk)
            view = chunk
            try:
                while view:
                    view = view[os.write(fd, view[:WRITE_PIECE]):]
            except OSError as e:
                raise LocalWriteError(f"writing {temp}: {e}") from e
            start_writeback(fd, total, n)
            total += n
        try:
            os.fsync(fd)
        except OSError as e:
            raise LocalWriteError(f"fsync {temp}: {e}") from e
    finally:
        os.close(fd)
    return total


__all__ = ["WRITE_PIECE", "Cancelled", "LocalWriteError", "start_writeback", "stream_to_temp"]
