"""Turning one sample file into tensors, in the DataLoader's worker processes.

Decoders are module-level functions (so they pickle into worker processes under any start method)
that take a path and return the sample. ``npy`` maps the file copy-on-write: the tensor's memory *is*
the page cache of the file, so the reading process copies nothing (the batch collation copies once,
into the shared-memory batch). Every failure is a :class:`SampleDecodeError` naming the file, so a
corrupt sample is a clear error in the training process, never a dead worker.
"""

from __future__ import annotations

import functools
import logging
import os
import zipfile
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from .lost import SampleLostError, carry_attributes, lost_aware, lost_error
from .retry import RETRY_SECONDS, retrying, transient

log = logging.getLogger("epochfs.torchclient")

Decoder = Callable[[str], Any]
DECODE_KINDS: tuple[str, ...] = ("auto", "npy", "npz", "pt", "bytes", "image")
MAX_ARRAY_BYTES = 2 << 30
"""Default ``max_array_bytes`` (2 GiB): the most bytes an array may declare, or an .npz member inflate to."""


class SampleDecodeError(ValueError):
    """A sample file could not be decoded; the message names the file and the decoder.

    Constructible from one message string, so the DataLoader can re-raise it in the training process
    with the worker's traceback attached; ``.path`` (and a subclass's ``_carried`` attributes) come
    along then too (:func:`~.lost.carry_attributes`).
    """

    _carried: tuple[str, ...] = ("path",)

    def __init__(self, msg: str, path: str | None = None) -> None:
        super().__init__(msg)
        self.path = path
        carry_attributes(self, self._carried, msg)


def check_max_bytes(max_array_bytes: int | None) -> int | None:
    """Validate a loader's ``max_array_bytes`` option: an int >= 1, or None for no limit."""
    if max_array_bytes is None:
        return None
    if isinstance(max_array_bytes, bool) or not isinstance(max_array_bytes, int) or max_array_bytes < 1:
        raise ValueError(f"max_array_bytes must be an int >= 1 or None (no limit), got {max_array_bytes!r}")
    return max_array_bytes


_NATIVE = "<" if np.little_endian else ">"


class DtypeError(TypeError):
    """A valid array whose dtype torch has no tensor type for (strings, bytes, structured records,
    datetimes): ``.dtype`` says which. Apart from TypeError's other causes so that the sample's
    error says the file is fine and its dtype is the problem, not that the file is corrupt."""

    def __init__(self, dtype: np.dtype[Any], cause: TypeError) -> None:
        super().__init__(f"{cause}")
        self.dtype = dtype


def _tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor over ``array``'s memory; only a non-native byte order forces a copy."""
    if array.dtype.byteorder not in ("=", "|", _NATIVE):
        array = array.astype(array.dtype.newbyteorder("="))
    try:
        return torch.from_numpy(array)
    except TypeError as exc:
        raise DtypeError(array.dtype, exc) from exc


def decode_npy(path: str) -> torch.Tensor:
    """A ``.npy`` file as a tensor backed by a private (copy-on-write) mapping of the file: no copy.

    Copy-on-write keeps the tensor writable (torch expects that) while writes, if a transform makes
    any, land in private pages and never reach the file, which the mount serves read-only anyway.

    The header is parsed by the strict parser ArrayLoader uses (:mod:`.npyheader`), not by
    ``np.load``: a bad header is the same :class:`~.npyheader.NpyHeaderError` (naming the file, the
    field and the value) from both loaders, and what it declares must fit in the file before it is
    mapped. One open serves the header and the mapping (``np.load`` opens the file twice).
    """
    from .npyheader import ArraySampleError, check_fits, read_npy_header  # .npyheader imports this module

    with open(path, "rb") as file:
        header = read_npy_header(file.fileno(), 0, path)
        check_fits(header, path, os.fstat(file.fileno()).st_size - header.length)
        spec = header.spec
        if spec.dtype.hasobject:
            raise ArraySampleError(f"sample {path} holds objects ({spec.dtype}), which only unpickling "
                                   "reads; EpochLoader does not unpickle", path)
        array = np.memmap(file, dtype=spec.dtype, mode="c", offset=header.length, shape=spec.shape,
                          order="F" if header.fortran else "C")
    return _tensor(array)


def decode_npz(path: str, *, max_array_bytes: int | None = MAX_ARRAY_BYTES) -> dict[str, torch.Tensor]:
    """A ``.npz`` file as a dict of tensors, one per array (compressed members are inflated here).

    Each member's ``.npy`` header is parsed strictly and what it declares must fit in the member; a
    member may inflate to at most ``max_array_bytes`` of array data (None: no limit), checked from
    the zip's recorded size before inflating and counted while inflating. The dict is an
    :class:`~epochfs.torchclient.npzread.NpzSample`: a name it lacks raises ``NpzMemberError`` (a
    KeyError and a SampleDecodeError) naming the file and the arrays it holds.
    """
    from .npzread import npz_sample, read_npz  # here: .npzread imports this module's SampleDecodeError

    return npz_sample(path, {name: _tensor(array) for name, array in read_npz(path, max_array_bytes)})


def decode_pt(path: str) -> Any:
    """A ``torch.save`` file, loaded with ``weights_only=True`` (no arbitrary code), on the CPU.

    Files in torch's zip format are memory-mapped, so large tensors are not read into memory twice.
    """
    return torch.load(path, weights_only=True, map_location="cpu", mmap=zipfile.is_zipfile(path))


def decode_bytes(path: str) -> torch.Tensor:
    """The raw bytes of the file as a 1-D uint8 tensor (one read, no further copy)."""
    return torch.from_numpy(np.fromfile(path, dtype=np.uint8))


_PROBE_PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00"
              b"\x90wS\xde\x00\x00\x00\x0cIDATx\xdac`db\x06\x00\x00\x0e\x00\x07\xe9\x927\xd4\x00\x00"
              b"\x00\x00IEND\xaeB`\x82")
"""A 1x1 RGB PNG, pixel (1, 2, 3): what :func:`_torchvision_decoder` decodes once to know that
torchvision.io's decoder works."""


@functools.cache
def _torchvision_decoder() -> Callable[[str], torch.Tensor] | None:
    """torchvision.io's decoder where a working torchvision is installed (once per process); None
    otherwise, and then Pillow decodes.

    Importing torchvision.io is not enough: a torchvision built for another torch (PyPI's CUDA
    wheel beside a CPU torch) fails at import with a RuntimeError, not an ImportError ("operator
    torchvision::nms does not exist"), and where its pure-Python parts were imported anyway (its
    ``ImageFolder`` and transforms need no C extension), torchvision.io imports but its decoders
    raise at each call ("Couldn't load the image extension"). So one tiny PNG is decoded here:
    any failure, or a wrong pixel, means Pillow, and one log line (per process) says why: a
    torchvision that is installed but unusable is worth an INFO line (its user expects it to
    decode), none installed only a DEBUG one."""
    try:
        from torchvision.io import ImageReadMode, decode_image, read_file

        probe = decode_image(torch.tensor(list(_PROBE_PNG), dtype=torch.uint8), mode=ImageReadMode.RGB)
        if probe.tolist() != [[[1]], [[2]], [[3]]]:
            log.info("images are decoded by Pillow: torchvision.io decoded a test image wrongly")
            return None
    except ModuleNotFoundError as e:
        if e.name not in ("torchvision", "torchvision.io"):
            log.info("images are decoded by Pillow: torchvision.io cannot be imported (%s)", e)
        else:
            log.debug("images are decoded by Pillow: torchvision is not installed")
        return None
    except Exception as e:
        log.info("images are decoded by Pillow: torchvision.io cannot decode (%s: %s)", type(e).__name__, e)
        return None

    def decode(path: str) -> torch.Tensor:
        return decode_image(read_file(path), mode=ImageReadMode.RGB)

    return decode


def decode_image_pillow(path: str) -> torch.Tensor:
    """An image file as a ``(3, H, W)`` uint8 tensor (RGB, as ImageFolder's loader converts it),
    decoded by Pillow."""
    from PIL import Image

    with Image.open(path) as img:
        rgb = img.convert("RGB")
    # (H, W, 3) over Pillow's buffer (read-only), copied once into a writable (3, H, W) array.
    return torch.from_numpy(np.array(np.asarray(rgb).transpose(2, 0, 1), order="C"))


def decode_image(path: str) -> torch.Tensor:
    """An image file (PNG, JPEG, BMP, GIF, WebP, TIFF...) as a ``(3, H, W)`` uint8 tensor, RGB.

    torchvision.io decodes it where a working torchvision is installed (libjpeg-turbo, libpng:
    faster, no copy from HWC to CHW); Pillow otherwise. Either way grayscale, palette and RGBA
    images come out as 3 channels, so images of one size batch together."""
    decoder = _torchvision_decoder()
    if decoder is not None and os.path.splitext(path)[1].lower() in _TORCHVISION_SUFFIXES:
        return decoder(path)
    return decode_image_pillow(path)


_TORCHVISION_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp"})
"""What torchvision.io.decode_image reads (others, such as BMP and TIFF, go to Pillow)."""

_BY_KIND: dict[str, Decoder] = {"npy": decode_npy, "npz": decode_npz, "pt": decode_pt, "bytes": decode_bytes,
                                "image": decode_image}
_BY_SUFFIX: dict[str, Decoder] = {".npy": decode_npy, ".npz": decode_npz, ".pt": decode_pt, ".pth": decode_pt}


def decode_auto(path: str, *, max_array_bytes: int | None = MAX_ARRAY_BYTES) -> Any:
    """Pick the decoder from the extension: .npy, .npz, .pt/.pth; anything else is raw bytes."""
    decoder = _BY_SUFFIX.get(os.path.splitext(path)[1].lower(), decode_bytes)
    if decoder is decode_npz:
        return decode_npz(path, max_array_bytes=max_array_bytes)
    return decoder(path)


def resolve_decoder(decode: str | Decoder, *, max_array_bytes: int | None = MAX_ARRAY_BYTES) -> Decoder:
    """The decoder for a kind name or a callable, validated up front with a clear error.

    ``max_array_bytes`` other than the default binds into "npz" and "auto" (a ``functools.partial``,
    which pickles into worker processes); a callable is used as it is."""
    if callable(decode):
        return decode
    if decode in ("auto", "npz") and max_array_bytes != MAX_ARRAY_BYTES:
        base = decode_auto if decode == "auto" else decode_npz
        return functools.partial(base, max_array_bytes=max_array_bytes)
    if decode == "auto":
        return decode_auto
    if decode == "image":
        _check_image_support()
    if isinstance(decode, str) and decode in _BY_KIND:
        return _BY_KIND[decode]
    raise ValueError(f"decode must be one of {', '.join(DECODE_KINDS)} or a callable taking a path; "
                     f"got {decode!r}")


def _check_image_support() -> None:
    """``decode="image"`` needs Pillow (or a working torchvision): say so up front, not per sample."""
    if _torchvision_decoder() is not None:
        return
    try:
        import PIL.Image  # noqa: F401
    except ImportError:
        raise ValueError("decode='image' needs Pillow (pip install pillow) or torchvision") from None


def load_sample(path: str, decoder: Decoder, transform: Callable[[Any], Any] | None = None, *,
                retry_seconds: float = RETRY_SECONDS) -> Any:
    """Decode ``path`` and apply ``transform``; decoding failures become a :class:`SampleDecodeError`.

    A read that fails as a path on a mount being replaced does (ENOENT, ENOTCONN: a FUSE server
    restart) is tried again for up to ``retry_seconds``, one log line per incident
    (:mod:`.retry`); the caller passes only paths the epoch lists. A file whose sample the remote
    lost raises :class:`~.lost.SampleLostError` (an OSError, errno EIO) at once (:mod:`.lost`).
    """
    try:
        sample = retrying(f"sample {path}", lost_aware(path, lambda: decoder(path)), seconds=retry_seconds)
    except (SampleDecodeError, SampleLostError):
        raise
    except OSError as exc:
        if not transient(exc):
            raise _decode_error(path, decoder, exc) from exc
        lost = lost_error(path, exc, final=True)
        if lost is not None:
            raise lost from exc
        raise SampleDecodeError(
            f"sample file vanished or never existed: {path}: {exc} (tried for {retry_seconds:g}s; was "
            "its epoch retired while nothing held it open, or is the mount gone?)", path) from exc
    except Exception as exc:
        raise _decode_error(path, decoder, exc) from exc
    return sample if transform is None else transform(sample)


def _decode_error(path: str, decoder: Decoder, exc: Exception) -> SampleDecodeError:
    """The error for ``decoder`` failing on ``path``, with the cause that fits: the built-in
    decoders fail on a corrupt, truncated or foreign file, or on a valid array whose dtype has no
    tensor type (:class:`DtypeError`); a ``decode=`` callable of the user's own is said to have
    raised, since nothing is known of what it reads (blaming the file would send its author to the
    wrong place)."""
    base = getattr(decoder, "func", decoder)
    name = getattr(base, "__name__", None) or type(base).__name__
    if not any(base is built_in for built_in in _BUILT_IN):  # identity: a callable may be unhashable
        qualname = getattr(base, "__qualname__", name)
        module = getattr(base, "__module__", None)
        own = f"{module}.{qualname}" if module else qualname
        return SampleDecodeError(f"cannot decode sample {path}: your decode= function {own} raised "
                                 f"{type(exc).__name__}: {exc}", path)
    if isinstance(exc, DtypeError):
        return SampleDecodeError(
            f"cannot decode sample {path} with {name}: the array's dtype {exc.dtype} cannot become a "
            f"tensor ({exc}); the file is a valid array: store numbers or bools, or pass your own "
            "decode=", path)
    return SampleDecodeError(f"cannot decode sample {path} with {name}: {type(exc).__name__}: {exc} "
                             "(the file is corrupt, truncated or not in this format; files of "
                             "other kinds in the epoch are left out with include= or exclude=, "
                             "e.g. exclude=['*.txt'])", path)


_BUILT_IN: tuple[Callable[..., Any], ...] = (*_BY_KIND.values(), decode_auto, decode_image_pillow)
"""The decoders this module gives (``resolve_decoder``'s partials wrap two of them): their failures
are the file's; any other decoder is the user's ``decode=``."""
