"""Fixed-shape array samples read straight into the caller's memory: ``.npy``, stored ``.npz`` members, raw.

Why: :class:`~epochfs.torchclient.arrayloader.ArrayLoader` reads each sample with one ``os.preadv``
into its row of a batch tensor, on threads (reading is I/O, which releases the GIL). That needs to
know, per file, where the array's bytes are, without decoding anything in Python. A reader is made
once per loader from the first file (:func:`make_reader`) and keeps a *template*: the exact header
bytes that sit in front of the array data in that file. Then each sample costs one ``open``, one
``preadv`` of [header scratch, row] and one ``close``; the header read is compared with the template
as bytes. Only a file whose header differs takes a slow path, which parses it and either reads it
(the same shape and dtype with other header bytes, a member elsewhere in the zip) or raises
:class:`ArraySampleError` naming the file.

- ``npy``: the header is the ``.npy`` header (magic, version, length, dict); the data follows it.
- ``npz``: ``np.savez`` stores each member uncompressed (``ZIP_STORED``) as ``<name>.npy``: the
  template is the member's zip local header (checked field by field: signature, no encryption, stored,
  name and extra lengths, name; not the CRC or the date, which differ per file) plus its ``.npy``
  header, at the offset the first file has it. ``np.savez_compressed`` members are refused by name.
  Only the member's bytes are read: the zip's CRC is not checked (the sidecar verified the whole
  object's checksum when it fetched it) and damage elsewhere in the file is not seen.
- ``raw``: no header; the declared dtype and shape say it all, and the file size must match exactly.

Arrays must be in native byte order and C order (or a layout where both orders agree), with a dtype
torch holds; other files are errors, never a silent conversion.

The first file's header is parsed strictly (:func:`~.npyheader.parse_npy_header`) and what it declares
must fit in the file (or the member) and under ``max_array_bytes`` before the loader allocates its
batch buffers from it; later files' headers are compared with the template as bytes, and only one
that differs is parsed (strictly too).
"""

from __future__ import annotations

import os
import struct
import zipfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from .decode import MAX_ARRAY_BYTES
from .npyheader import (
    ArraySampleError,
    ArraySpec,
    NpyHeader,
    NpzMemberError,
    check_fits,
    check_limit,
    check_spec,
    layouts_differ,
    mismatch_error,
    preadv_at_least,
    read_npy_header,
    truncated_error,
)

__all__ = ["FORMATS", "MAX_ARRAY_BYTES", "ArraySampleError", "ArraySpec", "NpyReader", "NpzMemberError",
           "NpzReader", "RawReader", "SampleReader", "expected_spec", "locate_member", "make_reader"]

FORMATS: tuple[str, ...] = ("auto", "npy", "npz", "raw")
_ZIP_LOCAL = struct.Struct("<4sHHHHHIIIHH")  # a zip local file header, 30 bytes before name and extra
_ZIP_LOCAL_SIG = b"PK\x03\x04"


def open_sample(path: str) -> int:
    """A descriptor of ``path``, or :class:`ArraySampleError` naming it, raised from the OSError: the
    loader's retry (a restarting mount's ENOENT) and lost-sample check (EIO, a placeholder's ELOOP)
    look for that OSError, the first file's probe as every later read."""
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise ArraySampleError(f"cannot open sample {path}: {exc}", path) from exc


class SampleReader:
    """Reads one sample file into a row (a writable byte view of ``spec.nbytes``); thread-safe."""

    kind = ""
    scratch_bytes = 0
    """Bytes of per-thread scratch :meth:`read_into` needs (the template header's length)."""

    def __init__(self, spec: ArraySpec) -> None:
        self.spec = spec

    def read_into(self, path: str, row: memoryview, scratch: bytearray) -> None:
        """Fill ``row`` with the array of ``path``, or raise :class:`ArraySampleError` naming it."""
        fd = open_sample(path)
        try:
            self._read(fd, path, row, scratch)
        except OSError as exc:
            raise ArraySampleError(f"cannot read sample {path}: {exc}", path) from exc
        finally:
            os.close(fd)

    def _read(self, fd: int, path: str, row: memoryview, scratch: bytearray) -> None:
        raise NotImplementedError

    def _expect(self, header: NpyHeader, path: str, where: str = "") -> None:
        check_spec(header.spec, path)
        if header.spec != self.spec:
            raise mismatch_error(path, header.spec, self.spec, where)
        if layouts_differ(header):
            raise ArraySampleError(f"sample {path}{where} is stored in Fortran order; ArrayLoader reads C "
                                   "order (resave with np.ascontiguousarray, or use EpochLoader)", path)


class NpyReader(SampleReader):
    """``.npy`` files: one ``preadv`` of [header, row] at offset 0, the header compared as bytes."""

    kind = "npy"

    def __init__(self, spec: ArraySpec, header: bytes) -> None:
        super().__init__(spec)
        self.header = header
        self.scratch_bytes = len(header)

    @classmethod
    def from_file(cls, path: str, expect: ArraySpec | None,
                  max_array_bytes: int | None = MAX_ARRAY_BYTES) -> NpyReader:
        fd = open_sample(path)
        try:
            header = read_npy_header(fd, 0, path)
            check_fits(header, path, os.fstat(fd).st_size - header.length)  # before any allocation
            check_limit(header.spec, path, max_array_bytes)
            reader = cls(expect or check_spec(header.spec, path), os.pread(fd, header.length, 0))
            reader._expect(header, path)
        except OSError as exc:
            raise ArraySampleError(f"cannot read sample {path}: {exc}", path) from exc
        finally:
            os.close(fd)
        return reader

    def _read(self, fd: int, path: str, row: memoryview, scratch: bytearray) -> None:
        head = memoryview(scratch)[:len(self.header)]
        need = len(self.header) + len(row)
        got = preadv_at_least(fd, [head, row], 0, need)
        if got >= len(self.header) and head == self.header:
            if got < need:
                raise truncated_error(path, fd, need, f"a .npy of {self.spec.describe()}")
            return
        header = read_npy_header(fd, 0, path)  # another header: other padding, version, shape, dtype
        self._expect(header, path)
        need = header.length + len(row)
        if preadv_at_least(fd, [row], header.length, len(row)) < len(row):
            raise truncated_error(path, fd, need, f"a .npy of {self.spec.describe()}")


@dataclass(frozen=True)
class _Member:
    """Where a stored ``.npz`` member's array is: its local header's offset, lengths and .npy header."""

    local_offset: int
    name: bytes
    extra_length: int
    npy: NpyHeader

    @property
    def npy_offset(self) -> int:
        return self.local_offset + _ZIP_LOCAL.size + len(self.name) + self.extra_length

    @property
    def data_offset(self) -> int:
        return self.npy_offset + self.npy.length


def _member_names(zf: zipfile.ZipFile) -> list[str]:
    return [n[:-4] for n in zf.namelist() if n.endswith(".npy")]


def locate_member(fd: int, path: str, member: str | None) -> _Member:
    """Find ``member`` (None: the only one) in the zip's central directory, and check it is stored."""
    try:
        with os.fdopen(os.dup(fd), "rb") as handle, zipfile.ZipFile(handle) as zf:
            names = _member_names(zf)
            if member is None:
                if len(names) != 1:
                    raise ArraySampleError(f"sample {path} holds arrays {names}; pass member= to say which "
                                           "one ArrayLoader reads", path)
                member = names[0]
            try:
                info = zf.getinfo(member + ".npy")
            except KeyError:
                raise NpzMemberError(f"sample {path} has no array {member!r} (it holds {names})",
                                     path) from None
    except zipfile.BadZipFile as exc:
        named_npy = str(path).lower().endswith(".npy")
        hint = "; the name ends in .npy: pass format='npy' or 'auto'" if named_npy else ""
        raise ArraySampleError(f"sample {path} is not a readable .npz (zip) file, or it is truncated: {exc}"
                               f"{hint}", path) from exc
    if info.compress_type != zipfile.ZIP_STORED:
        raise ArraySampleError(
            f"sample {path}: array {member!r} is compressed (np.savez_compressed); ArrayLoader reads "
            "stored members only, straight from the file (save with np.savez, or use EpochLoader)", path)
    if info.flag_bits & 0x1:
        raise ArraySampleError(f"sample {path}: array {member!r} is encrypted", path)
    if info.compress_size != info.file_size:
        raise ArraySampleError(f"sample {path}: the zip directory records array {member!r} as stored, but "
                               f"with {info.compress_size} bytes stored for {info.file_size} (a corrupt zip)",
                               path)
    local = os.pread(fd, _ZIP_LOCAL.size, info.header_offset)
    if len(local) < _ZIP_LOCAL.size or local[:4] != _ZIP_LOCAL_SIG:
        raise ArraySampleError(f"sample {path}: no zip local header for {member!r} where the directory says",
                               path)
    name_length, extra_length = _ZIP_LOCAL.unpack(local)[9:11]
    name = os.pread(fd, name_length, info.header_offset + _ZIP_LOCAL.size)
    npy_offset = info.header_offset + _ZIP_LOCAL.size + name_length + extra_length
    where = f" (member {member!r})"
    npy = read_npy_header(fd, npy_offset, path, where)
    found = _Member(info.header_offset, name, extra_length, npy)
    # What the member holds after its .npy header: as the zip directory records it, and at most what
    # the file has there (a directory may lie); checked before the header's shape is allocated.
    available = min(info.file_size, os.fstat(fd).st_size - npy_offset) - npy.length
    check_fits(npy, path, available, where, holder="the member")
    return found


class NpzReader(SampleReader):
    """Stored ``.npz`` members: one ``preadv`` of [local header + .npy header, row] at the template offset."""

    kind = "npz"

    def __init__(self, spec: ArraySpec, member: str, template: _Member, prefix: bytes) -> None:
        super().__init__(spec)
        self.member = member
        self.template = template
        self.prefix = prefix
        self.scratch_bytes = len(prefix)
        self._npy_at = template.npy_offset - template.local_offset

    @classmethod
    def from_file(cls, path: str, member: str | None, expect: ArraySpec | None,
                  max_array_bytes: int | None = MAX_ARRAY_BYTES) -> NpzReader:
        fd = open_sample(path)
        try:
            found = locate_member(fd, path, member)
            name = found.name.decode("utf-8", "replace")[:-4]
            check_limit(found.npy.spec, path, max_array_bytes, f" (member {name!r})")
            spec = expect or check_spec(found.npy.spec, path)
            prefix = os.pread(fd, found.data_offset - found.local_offset, found.local_offset)
            reader = cls(spec, name, found, prefix)
            reader._expect(found.npy, path, f" (member {name!r})")
        except OSError as exc:
            raise ArraySampleError(f"cannot read sample {path}: {exc}", path) from exc
        finally:
            os.close(fd)
        return reader

    def _prefix_fits(self, head: memoryview) -> bool:
        """The local header is the template member's (CRC and dates may differ) and the .npy header equal."""
        t = self.template
        sig, _version, flags, method, _time, _date, _crc, _csize, _usize, name_length, extra_length = \
            _ZIP_LOCAL.unpack_from(head)
        return (sig == _ZIP_LOCAL_SIG and not flags & 0x1 and method == zipfile.ZIP_STORED
                and name_length == len(t.name) and extra_length == t.extra_length
                and head[_ZIP_LOCAL.size:_ZIP_LOCAL.size + name_length] == t.name
                and head[self._npy_at:] == self.prefix[self._npy_at:])

    def _read(self, fd: int, path: str, row: memoryview, scratch: bytearray) -> None:
        head = memoryview(scratch)[:len(self.prefix)]
        need = len(self.prefix) + len(row)
        got = preadv_at_least(fd, [head, row], self.template.local_offset, need)
        what = f"member {self.member!r} of {self.spec.describe()}"
        if got >= len(self.prefix) and self._prefix_fits(head):
            if got < need:
                raise truncated_error(path, fd, self.template.local_offset + need, what)
            return
        found = locate_member(fd, path, self.member)  # elsewhere in this zip, or not fitting at all
        self._expect(found.npy, path, f" (member {self.member!r})")
        if preadv_at_least(fd, [row], found.data_offset, len(row)) < len(row):
            raise truncated_error(path, fd, found.data_offset + len(row), what)


class RawReader(SampleReader):
    """Raw files of exactly ``spec.nbytes``: one ``preadv`` of [row, one more byte] to catch longer files."""

    kind = "raw"
    scratch_bytes = 1

    def _read(self, fd: int, path: str, row: memoryview, scratch: bytearray) -> None:
        tail = memoryview(scratch)[:1]
        got = preadv_at_least(fd, [row, tail], 0, len(row))
        if got < len(row):
            raise truncated_error(path, fd, len(row), f"a raw {self.spec.describe()}")
        if got > len(row):
            size = os.fstat(fd).st_size
            raise ArraySampleError(f"sample {path} holds {size} bytes, more than the {len(row)} of a raw "
                                   f"{self.spec.describe()} (another shape or dtype?)", path)


def _check_raw_size(first: str, spec: ArraySpec) -> None:
    """A first raw file of another size than the declared array is refused before buffers are made.
    (One that cannot be stat'ed now is left to the reader, which retries a mount's restart.)"""
    try:
        size = os.stat(first).st_size
    except OSError:
        return
    if size < spec.nbytes:
        raise ArraySampleError(f"sample {first} is truncated: {size} bytes, but a raw {spec.describe()} "
                               f"needs {spec.nbytes}", first)
    if size > spec.nbytes:
        raise ArraySampleError(f"sample {first} holds {size} bytes, more than the {spec.nbytes} of a raw "
                               f"{spec.describe()} (another shape or dtype?)", first)


def expected_spec(dtype: Any, shape: Any) -> tuple[np.dtype[Any] | None, tuple[int, ...] | None]:
    """Validate the declared dtype and shape (either may be None: then taken from the first file)."""
    try:
        dt = None if dtype is None else np.dtype(dtype)
    except TypeError as exc:  # numpy's "data type 'floaty' not understood" names no argument
        raise ValueError(f"dtype must be a numpy or torch dtype ('float32', np.float32, torch.float32), "
                         f"got {dtype!r}") from exc
    if shape is None:
        return dt, None
    if isinstance(shape, int):
        shape = (shape,)
    dims = tuple(shape)
    if not all(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n >= 0 for n in dims):
        raise ValueError(f"shape must be a tuple of ints >= 0, got {shape!r}")
    return dt, tuple(int(n) for n in dims)


def make_reader(kind: str, first: str, *, member: str | None = None, dtype: Any = None,
                shape: Any = None, max_array_bytes: int | None = MAX_ARRAY_BYTES) -> SampleReader:
    """The reader for a loader, its template taken from ``first`` (the epoch's first file).

    ``kind``: "npy", "npz", "raw" or "auto" (by ``first``'s extension: ``.npy``, ``.npz``; anything
    else is raw, which needs ``dtype`` and ``shape``). Given ``dtype``/``shape`` are what every sample
    must hold; those not given come from ``first``. One sample's array may be at most
    ``max_array_bytes`` (None: no limit), and what ``first``'s header declares must fit in the file:
    both are checked here, before the loader allocates anything of that size.
    """
    if kind not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {kind!r}")
    dt, dims = expected_spec(dtype, shape)
    if kind == "auto":
        kind = {".npy": "npy", ".npz": "npz"}.get(os.path.splitext(first)[1].lower(), "raw")
    if kind == "raw":
        if dt is None or dims is None:
            raise ValueError(f"raw samples need dtype= and shape= ({first} is neither .npy nor .npz)")
        raw = check_spec(ArraySpec(dt, dims), first)
        check_limit(raw, first, max_array_bytes, what="a raw sample of")
        _check_raw_size(first, raw)
        return RawReader(raw)
    probe: SampleReader = NpyReader.from_file(first, None, max_array_bytes) if kind == "npy" else \
        NpzReader.from_file(first, member, None, max_array_bytes)
    found = probe.spec
    if (dt is not None and dt != found.dtype) or (dims is not None and dims != found.shape):
        expected = ArraySpec(dt or found.dtype, dims if dims is not None else found.shape)
        raise mismatch_error(first, found, expected,
                             "" if kind == "npy" else f" (member {getattr(probe, 'member', '')!r})")
    return probe
