"""What a fixed-shape array sample is and where its bytes start: the ``.npy`` header, the spec, the errors.

Why a module of its own: :mod:`.arrays` reads samples straight into a batch row and needs, without
decoding anything in Python, to parse a ``.npy`` header (alone or inside a stored ``.npz`` member),
to refuse what cannot be copied byte for byte into a tensor (objects, records, non-native byte
order, Fortran order where it differs from C order) and to name the file in every error. Those
rules are here, apart from the readers that use them; the readers' fast path never calls them.
"""

from __future__ import annotations

import ast
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .decode import SampleDecodeError

NPY_MAGIC = b"\x93NUMPY"
_HEADER_PROBE = 4096  # bytes read to parse a header on the slow path (np.save writes 128)
_MAX_HEADER = 10_000  # np.load's own limit on a header's length (it refuses longer ones)


class ArraySampleError(SampleDecodeError):
    """A sample file that does not fit the loader (format, shape, dtype, size); the message names it."""


@dataclass(frozen=True)
class ArraySpec:
    """The one dtype and shape every sample of a loader has."""

    dtype: np.dtype[Any]
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return int(self.dtype.itemsize * int(np.prod(self.shape, dtype=np.int64)))

    def describe(self) -> str:
        return f"{self.dtype.name} {self.shape}"


@dataclass(frozen=True)
class NpyHeader:
    """A parsed ``.npy`` header: the array's spec, its order and the bytes from magic to data."""

    spec: ArraySpec
    fortran: bool
    length: int


class _NeedMore(Exception):
    def __init__(self, length: int) -> None:
        self.length = length


def parse_npy_header(data: bytes, path: str) -> NpyHeader:
    """Parse the ``.npy`` header at the start of ``data`` (``ast.literal_eval``: literals only)."""
    if len(data) < 10 or data[:6] != NPY_MAGIC:
        raise ArraySampleError(f"sample {path} is not a .npy array (no \\x93NUMPY magic at its start)", path)
    major = data[6]
    if major == 1:
        start, (length,) = 10, struct.unpack_from("<H", data, 8)
    elif major in (2, 3) and len(data) >= 12:
        start, (length,) = 12, struct.unpack_from("<I", data, 8)
    else:
        raise ArraySampleError(f"sample {path}: .npy format version {major} is not supported", path)
    if length > _MAX_HEADER:
        raise ArraySampleError(f"sample {path}: .npy header of {length} bytes, more than np.load reads", path)
    if len(data) < start + length:
        raise _NeedMore(start + length)
    try:
        text = data[start:start + length].decode("utf-8" if major == 3 else "latin1")
        fields = ast.literal_eval(text)
        dtype = np.lib.format.descr_to_dtype(fields["descr"])
        shape = tuple(int(n) for n in fields["shape"])
        fortran = bool(fields["fortran_order"])
    except Exception as exc:
        raise ArraySampleError(f"sample {path}: unreadable .npy header ({type(exc).__name__}: {exc})",
                               path) from exc
    return NpyHeader(ArraySpec(dtype, shape), fortran, start + length)


def read_npy_header(fd: int, offset: int, path: str) -> NpyHeader:
    """Read and parse the ``.npy`` header at ``offset`` of an open file."""
    data = os.pread(fd, _HEADER_PROBE, offset)
    try:
        return parse_npy_header(data, path)
    except _NeedMore as more:
        data = os.pread(fd, more.length, offset)
        if len(data) < more.length:
            raise ArraySampleError(f"sample {path}: .npy header cut short (truncated file)", path) from None
        return parse_npy_header(data, path)


def check_spec(spec: ArraySpec, path: str) -> ArraySpec:
    """Refuse what cannot be read byte for byte into a tensor row (ArraySampleError naming ``path``)."""
    if spec.dtype.hasobject or spec.dtype.fields is not None or spec.dtype.subdtype is not None:
        raise ArraySampleError(f"sample {path} holds {spec.dtype} (objects, records or subarrays); "
                               "ArrayLoader reads plain numeric arrays (use EpochLoader for others)", path)
    if not spec.dtype.isnative:
        raise ArraySampleError(f"sample {path} holds {spec.dtype.str} in non-native byte order; ArrayLoader "
                               "copies bytes as they are (resave in native order, or use EpochLoader)", path)
    if spec.nbytes == 0:
        raise ArraySampleError(f"sample {path} holds an empty array {spec.describe()}", path)
    return spec


def layouts_differ(header: NpyHeader) -> bool:
    """Fortran order stores other bytes than C order once two dimensions are longer than 1."""
    return header.fortran and sum(n > 1 for n in header.spec.shape) > 1


def mismatch_error(path: str, found: ArraySpec, expected: ArraySpec, where: str = "") -> ArraySampleError:
    return ArraySampleError(
        f"sample {path}{where} holds {found.describe()}, but this loader reads {expected.describe()} "
        "(every sample must have the same dtype and shape)", path)


def truncated_error(path: str, fd: int, need: int, what: str) -> ArraySampleError:
    try:
        size = os.fstat(fd).st_size
    except OSError:
        size = -1
    return ArraySampleError(f"sample {path} is truncated: {size} bytes, but {what} needs {need}", path)


def preadv_at_least(fd: int, buffers: Sequence[memoryview], offset: int, need: int) -> int:
    """``os.preadv`` into ``buffers``; continue after a short read until ``need`` bytes or end of file."""
    got = os.preadv(fd, buffers, offset)
    while got < need:
        rest: list[memoryview] = []
        skip = got
        for buf in buffers:
            if skip >= len(buf):
                skip -= len(buf)
                continue
            rest.append(buf[skip:])
            skip = 0
        more = os.preadv(fd, rest, offset + got)
        if more <= 0:
            break
        got += more
    return got
