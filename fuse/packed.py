"""Bytes kept zlib-compressed in independent fixed-size chunks, sliced without inflating the rest.

Why: an epoch's manifest is ~100 bytes per file as text (path, size, checksum), and the view keeps
two of them once a trainer read one: as plain ``bytes``, ~200 bytes per file, more than the epoch's
whole tree. Compressed in 64 KiB chunks it is a fraction of that (paths share long prefixes), and a
FUSE read of ``size`` bytes at ``offset`` inflates only the one or two chunks it touches (the kernel
reads at most 128 KiB at a time and keeps what it read in its page cache).

A short uncompressed ``prefix`` comes first: the manifest's header line, whose counts are known only
once the body has been written.
"""

from __future__ import annotations

import zlib
from typing import overload

CHUNK = 1 << 16
LEVEL = 6


class PackedBytes:
    """Immutable bytes: ``len()``, slices (``data[a:b]``), ``bytes(data)``; made by :class:`PackedWriter`."""

    def __init__(self, prefix: bytes, chunks: list[bytes], size: int, chunk: int) -> None:
        self._prefix = prefix
        self._chunks = chunks
        self._body = size
        self._chunk = chunk
        self._last: tuple[int, bytes] = (-1, b"")  # the chunk inflated last (reads are sequential)

    def __len__(self) -> int:
        return len(self._prefix) + self._body

    def nbytes(self) -> int:
        """Bytes held (compressed chunks and the prefix): what it costs in memory."""
        return len(self._prefix) + sum(len(c) for c in self._chunks)

    def _inflate(self, i: int) -> bytes:
        last = self._last  # one read of the attribute: another thread may replace it meanwhile
        if last[0] == i:
            return last[1]
        raw = zlib.decompress(self._chunks[i])
        self._last = (i, raw)
        return raw

    def _body_range(self, start: int, stop: int) -> bytes:
        if start >= stop:
            return b""
        step = self._chunk
        first, last = start // step, (stop - 1) // step
        parts = [self._inflate(i) for i in range(first, last + 1)]
        data = parts[0] if len(parts) == 1 else b"".join(parts)
        base = first * step
        return data[start - base:stop - base]

    @overload
    def __getitem__(self, i: int) -> int: ...

    @overload
    def __getitem__(self, i: slice) -> bytes: ...

    def __getitem__(self, i: int | slice) -> int | bytes:
        n = len(self)
        if isinstance(i, int):
            if i < 0:
                i += n
            if not 0 <= i < n:
                raise IndexError(i)
            return self[i:i + 1][0]
        start, stop, stride = i.indices(n)
        if stride != 1:
            return bytes(self)[i]
        p = len(self._prefix)
        head = self._prefix[start:stop] if start < p else b""
        body = self._body_range(max(start, p) - p, max(stop, p) - p)
        return head + body if head else body

    def __bytes__(self) -> bytes:
        return self[0:len(self)]

    def __repr__(self) -> str:
        return f"PackedBytes({len(self)} bytes in {self.nbytes()})"


class PackedWriter:
    """Append bytes; :meth:`finish` compresses what is left and puts ``prefix`` in front."""

    def __init__(self, *, chunk: int = CHUNK, level: int = LEVEL) -> None:
        if chunk <= 0:
            raise ValueError("chunk must be positive")
        self._chunk = chunk
        self._level = level
        self._buf = bytearray()
        self._chunks: list[bytes] = []
        self._size = 0

    def write(self, data: bytes) -> None:
        self._buf += data
        self._size += len(data)
        step = self._chunk
        if len(self._buf) >= step:
            whole = len(self._buf) - len(self._buf) % step
            for at in range(0, whole, step):
                self._chunks.append(zlib.compress(bytes(self._buf[at:at + step]), self._level))
            del self._buf[:whole]

    def finish(self, prefix: bytes = b"") -> PackedBytes:
        if self._buf:
            self._chunks.append(zlib.compress(bytes(self._buf), self._level))
            self._buf = bytearray()
        return PackedBytes(bytes(prefix), self._chunks, self._size, self._chunk)
