"""What a fixed-shape array sample is and where its bytes start: the ``.npy`` header, the spec, the errors.

Why a module of its own: :mod:`.arrays` reads samples straight into a batch row and needs, without
decoding anything in Python, to parse a ``.npy`` header (alone or inside a stored ``.npz`` member),
to refuse what cannot be copied byte for byte into a tensor (objects, records, non-native byte
order, Fortran order where it differs from C order) and to name the file in every error. Those
rules are here, apart from the readers that use them; the readers' fast path never calls them.

Parsing is strict, stricter than ``np.load``: the header must be a dict of exactly ``descr`` (a dtype
string numpy knows), ``fortran_order`` (True or False) and ``shape`` (a tuple of integer literals
>= 0), and the bytes it declares (``prod(shape) * itemsize``) must fit in what holds them (the file,
or the zip member) and under the loader's ``max_array_bytes``, checked before anything is allocated.
Every refusal is a :class:`NpyHeaderError` naming the file, the field and the value found.
"""

from __future__ import annotations

import ast
import math
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
_VERSIONS = ((1, 0), (2, 0), (3, 0))
_KEYS = frozenset({"descr", "fortran_order", "shape"})


class ArraySampleError(SampleDecodeError):
    """A sample file that does not fit the loader (format, shape, dtype, size); the message names it."""


class NpyHeaderError(ArraySampleError):
    """A ``.npy`` header that is malformed or declares more than may be read; the message names the file,
    the field (``field``: "shape", "descr", "fortran_order", "version", "header length", "header") and the
    value found (``value``). Constructible from one message string, as every :class:`SampleDecodeError`,
    and all three come along from a DataLoader worker then."""

    _carried = ("path", "field", "value")

    def __init__(self, msg: str, path: str | None = None, field: str | None = None,
                 value: Any = None) -> None:
        self.field = field  # set before the base's __init__, which notes or recovers them
        self.value = value
        super().__init__(msg, path)


class NpzMemberError(ArraySampleError, KeyError):
    """An ``.npz`` sample without the array asked for; the message names the file, the array and the
    arrays it holds. A KeyError too, so code that caught the bare KeyError still catches it."""

    def __str__(self) -> str:  # KeyError's own __str__ would quote the message
        return str(self.args[0]) if self.args else ""


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


def header_error(path: str, where: str, field: str, value: Any, why: str) -> NpyHeaderError:
    """The error for a bad field of a ``.npy`` header: the file, the field, the value found, and why."""
    return NpyHeaderError(f"sample {path}{where}: bad .npy header: {field} is {_shown(value)}; {why}",
                          path, field, value)


@dataclass(frozen=True)
class ArraySpec:
    """The one dtype and shape every sample of a loader has."""

    dtype: np.dtype[Any]
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return int(self.dtype.itemsize) * math.prod(self.shape)  # Python ints: no overflow

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


def parse_npy_header(data: bytes, path: str, where: str = "") -> NpyHeader:
    """Parse the ``.npy`` header at the start of ``data``, strictly (see the module's docstring).

    ``where`` follows ``path`` in messages (" (member 'x')" for an ``.npz`` member)."""
    if len(data) < 10 or data[:6] != NPY_MAGIC:
        raise ArraySampleError(f"sample {path}{where} is not a .npy array (no \\x93NUMPY magic at its start)",
                               path)
    version = (data[6], data[7])
    if version not in _VERSIONS:
        raise header_error(path, where, "version", f"{version[0]}.{version[1]}",
                           "the .npy format versions are 1.0, 2.0 and 3.0")
    if version[0] == 1:
        start, (length,) = 10, struct.unpack_from("<H", data, 8)
    elif len(data) < 12:
        raise _NeedMore(12)
    else:
        start, (length,) = 12, struct.unpack_from("<I", data, 8)
    if length > _MAX_HEADER:
        raise header_error(path, where, "header length", length,
                           f"np.load reads headers of at most {_MAX_HEADER} bytes")
    if len(data) < start + length:
        raise _NeedMore(start + length)
    raw = data[start:start + length]
    try:
        text = raw.decode("utf-8" if version[0] == 3 else "latin1")
        fields = ast.literal_eval(text)
    except (UnicodeDecodeError, SyntaxError, ValueError, TypeError, MemoryError, RecursionError) as exc:
        raise header_error(path, where, "header", raw.strip(),
                           f"not a Python literal ({type(exc).__name__}: {exc})") from exc
    if not isinstance(fields, dict) or set(fields) != _KEYS:
        raise header_error(path, where, "header", fields,
                           "a .npy header is a dict of exactly 'descr', 'fortran_order' and 'shape'")
    shape, fortran, descr = fields["shape"], fields["fortran_order"], fields["descr"]
    if type(shape) is not tuple or not all(type(n) is int and n >= 0 for n in shape):
        raise header_error(path, where, "shape", shape, "it must be a tuple of integer literals >= 0")
    if type(fortran) is not bool:
        raise header_error(path, where, "fortran_order", fortran, "it must be True or False")
    if type(descr) is not str:
        raise header_error(path, where, "descr", descr, "it must be a dtype string such as '<f4' (a record "
                           "or subarray descr: these loaders read plain numeric arrays)")
    try:
        dtype = np.dtype(descr)
    except (TypeError, ValueError, SyntaxError) as exc:
        raise header_error(path, where, "descr", descr, f"not a dtype numpy knows ({exc})") from exc
    return NpyHeader(ArraySpec(dtype, shape), fortran, start + length)


def read_npy_header(fd: int, offset: int, path: str, where: str = "") -> NpyHeader:
    """Read and parse the ``.npy`` header at ``offset`` of an open file."""
    data = os.pread(fd, _HEADER_PROBE, offset)
    try:
        return parse_npy_header(data, path, where)
    except _NeedMore as more:
        data = os.pread(fd, more.length, offset)
        if len(data) < more.length:
            raise ArraySampleError(f"sample {path}{where}: .npy header cut short (truncated file)",
                                   path) from None
        return parse_npy_header(data, path, where)


def check_fits(header: NpyHeader, path: str, available: int, where: str = "",
               holder: str = "the file") -> None:
    """Refuse a header declaring more data bytes than ``available`` (what ``holder`` has after it).

    The first check of a header's shape, before anything is allocated for it: a corrupt header
    (``(2**40,)`` on a small file) is refused here, not by the allocator."""
    spec = header.spec
    if spec.nbytes > available:
        raise NpyHeaderError(
            f"sample {path}{where}: bad .npy header: shape is {_shown(spec.shape)}; with descr "
            f"{spec.dtype.str!r} it declares {spec.nbytes:,} bytes of data, but {holder} holds "
            f"{max(available, 0):,} after the {header.length}-byte header (a corrupt header or a "
            "truncated file)", path, "shape", spec.shape)


def check_limit(spec: ArraySpec, path: str, max_array_bytes: int | None, where: str = "",
                what: str = ".npy header") -> None:
    """Refuse an array of more than ``max_array_bytes`` (None: no limit) before it is allocated."""
    if max_array_bytes is not None and spec.nbytes > max_array_bytes:
        raise NpyHeaderError(
            f"sample {path}{where}: {what} shape {_shown(spec.shape)} of {spec.dtype.str!r} declares "
            f"{spec.nbytes:,} bytes, more than max_array_bytes={max_array_bytes:,} (pass a larger "
            "max_array_bytes= to the loader, or None for no limit)", path, "shape", spec.shape)


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


class ArrayMismatchError(ArraySampleError):
    """A sample of another dtype or shape than the loader's (the caller may say how it chose its own)."""


def mismatch_error(path: str, found: ArraySpec, expected: ArraySpec, where: str = "") -> ArraySampleError:
    return ArrayMismatchError(
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
