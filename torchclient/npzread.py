"""``.npz`` samples for :func:`~epochfs.torchclient.decode.decode_npz`: bounded, strict, every error named.

Why not ``np.load``: it allocates what a member's ``.npy`` header declares before reading a byte of
data (a header saying ``(2**40,)`` is an 8 TB allocation), inflates a compressed member whatever its
size, and a missing array is a bare ``KeyError``. Here each member is read through the strict header
parser of :mod:`.npyheader`, its declared data must fit in the member's size as the zip directory
records it, the member may inflate to at most ``max_array_bytes`` after its header (checked from the
recorded size before inflating, and counted while reading, so a zip entry that under-reports its
size is caught too), and the arrays come back as an :class:`NpzSample`, whose missing names raise an
:class:`~epochfs.torchclient.npyheader.NpzMemberError` naming the file and the arrays it holds.
"""

from __future__ import annotations

import zipfile
import zlib
from typing import IO, Any

import numpy as np
import torch

from .npyheader import (
    _MAX_HEADER,
    ArraySampleError,
    NpyHeader,
    NpzMemberError,
    _NeedMore,
    check_fits,
    parse_npy_header,
)

_CHUNK = 16 << 20  # bytes inflated per read: a bounded amount of memory beyond the array itself
_MAX_HEADER_BYTES = 12 + _MAX_HEADER  # the longest .npy header: magic, version, length, dict


class NpzSample(dict[str, torch.Tensor]):
    """The arrays of one ``.npz`` sample by name; ``sample[name]`` for a name it lacks raises an
    :class:`NpzMemberError` (a KeyError) naming the file, the name and the names it holds.

    Batches collated from such samples are NpzSamples too (the DataLoader copies the first sample's):
    a missing name in one of them names the batch's first file."""

    path: str = ""

    def __missing__(self, key: str) -> torch.Tensor:
        raise NpzMemberError(f"sample {self.path} has no array {key!r} (it holds {list(self)})", self.path)


def read_npz(path: str, max_array_bytes: int | None) -> list[tuple[str, np.ndarray]]:
    """The arrays of the ``.npz`` file ``path``, by name (``.npy`` dropped, as ``np.load`` names them).

    Errors are :class:`ArraySampleError` (``NpyHeaderError`` for a bad header) naming the file and the
    member; OSErrors pass through (the caller retries those of a mount's restart)."""
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        hint = "; the name ends in .npy: pass decode='npy' or 'auto'" if path.lower().endswith(".npy") else ""
        raise ArraySampleError(f"sample {path} is not a readable .npz (zip) file, or it is truncated: {exc}"
                               f"{hint}", path) from exc
    arrays: list[tuple[str, np.ndarray]] = []
    with archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
            arrays.append((name, _read_member(archive, info, path, f" (member {name!r})", max_array_bytes)))
    return arrays


def _too_large(path: str, where: str, size: int, limit: int, how: str) -> ArraySampleError:
    return ArraySampleError(
        f"sample {path}{where} inflates to {how} {size:,} bytes of array data, more than "
        f"max_array_bytes={limit:,} (pass a larger max_array_bytes= to the loader, or None for no limit)",
        path)


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: str, where: str,
                 limit: int | None) -> np.ndarray:
    if limit is not None and info.file_size > limit + _MAX_HEADER_BYTES:  # refused before inflating a byte
        raise _too_large(path, where, info.file_size, limit, "(its zip entry records)")
    try:
        with archive.open(info) as stream:
            header = _read_header(stream, path, where)
            data_size = info.file_size - header.length
            check_fits(header, path, data_size, where, holder="the member (by its zip entry's recorded size)")
            if limit is not None and data_size > limit:
                raise _too_large(path, where, data_size, limit, "(its zip entry records)")
            if header.spec.dtype.hasobject:
                raise ArraySampleError(f"sample {path}{where} holds objects ({header.spec.dtype}), which "
                                       "only unpickling reads; EpochLoader does not unpickle", path)
            data = np.empty(header.spec.nbytes, dtype=np.uint8)
            _read_exactly(stream, memoryview(data.data), path, where)
            _drain(stream, data_size - len(data), path, where)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as exc:
        # A CRC mismatch, a broken deflate stream, an unsupported method, an encrypted member.
        raise ArraySampleError(f"sample {path}{where} cannot be read from the zip: {type(exc).__name__}: "
                               f"{exc}", path) from exc
    spec = header.spec
    array = data.view(spec.dtype)
    return array.reshape(spec.shape[::-1]).T if header.fortran else array.reshape(spec.shape)


def _read_header(stream: IO[bytes], path: str, where: str) -> NpyHeader:
    """Read just the ``.npy`` header (magic, version, length, then the dict) and parse it strictly."""
    data = b""
    need = 10
    while True:
        while len(data) < need:
            more = stream.read(need - len(data))
            if not more:
                break
            data += more
        if len(data) < need and need > 10:
            raise ArraySampleError(f"sample {path}{where}: .npy header cut short (truncated member)", path)
        try:
            return parse_npy_header(data, path, where)
        except _NeedMore as more_needed:
            need = more_needed.length


def _read_exactly(stream: IO[bytes], view: memoryview, path: str, where: str) -> None:
    """Fill ``view`` from ``stream`` in bounded reads; a member that ends first is truncated."""
    got = 0
    while got < len(view):
        chunk = stream.read(min(_CHUNK, len(view) - got))
        if not chunk:
            raise ArraySampleError(f"sample {path}{where} is truncated: its .npy header declares "
                                   f"{len(view):,} bytes of data, the member ends after {got:,}", path)
        view[got:got + len(chunk)] = chunk
        got += len(chunk)


def _drain(stream: IO[bytes], rest: int, path: str, where: str) -> None:
    """Read to the member's end (which checks its CRC), never more than ``rest`` bytes plus one: a
    member inflating past its recorded size is refused (counted here, whatever the zip reader does)."""
    while True:
        chunk = stream.read(min(_CHUNK, rest + 1))
        if not chunk:
            return
        rest -= len(chunk)
        if rest < 0:
            raise ArraySampleError(f"sample {path}{where} inflates to more bytes than its zip entry records "
                                   "(a corrupt or forged zip)", path)


def npz_sample(path: str, tensors: dict[str, Any]) -> NpzSample:
    """An :class:`NpzSample` of ``tensors`` for the file ``path``."""
    sample = NpzSample(tensors)
    sample.path = path
    return sample
