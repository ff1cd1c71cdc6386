"""The ``dtype=`` of :class:`~epochfs.torchclient.arrayloader.ArrayLoader`: numpy's or torch's.

The loader yields torch tensors, so a torch dtype (``torch.float32``) is what its users reach for;
its readers check files against a numpy dtype (:mod:`.arrays`). A torch dtype is taken as the numpy
dtype of the same bytes. One numpy has no dtype for (``torch.bfloat16``, the float8 types) is read
as its bits, an unsigned int of its size (``uint16`` for bfloat16), and the batch tensors are of the
torch dtype: raw files hold those bits as they are, and ``.npy``/``.npz`` files hold them as the
unsigned int (``t.view(torch.uint16).numpy()``), the only way numpy stores them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .npyheader import ArrayMismatchError, ArraySampleError

BITS = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}
"""The numpy dtype that holds a float of each size as its bits."""


def loader_dtype(dtype: Any) -> tuple[Any, torch.dtype | None]:
    """(the dtype the readers check files against, the torch dtype of the batches; None: the
    one torch has for that numpy dtype). ValueError for a torch dtype that cannot be read as bytes
    (a quantized one), naming what to pass instead."""
    if not isinstance(dtype, torch.dtype):
        return dtype, None
    try:  # by name: torch and numpy name each type both have alike (float32, int64, bool, complex64)
        return np.dtype(str(dtype).removeprefix("torch.")), None
    except TypeError:
        pass
    if dtype.is_floating_point and not dtype.is_complex and dtype.itemsize in BITS:
        return BITS[dtype.itemsize], dtype
    raise ValueError(f"dtype={dtype} has no numpy dtype and cannot be read as bits: pass a numpy dtype "
                     "such as 'float32' or np.float32 (or a torch one numpy has, such as torch.float32)")


def note_bits(exc: BaseException, view: torch.dtype | None) -> None:
    """On a sample of another dtype than a loader that reads ``view`` (a torch dtype numpy has none
    for) as its bits: a note that says so, since the error names only the unsigned int it reads."""
    if view is not None and isinstance(exc, ArrayMismatchError):
        bits = BITS[view.itemsize]
        exc.add_note(f"dtype={view} is read as its bits, {bits}: raw files hold them as they are, and a "
                     f".npy/.npz holds t.view(torch.int{8 * view.itemsize}).numpy().view(np.{bits})")


def torch_dtype(dtype: np.dtype[Any], path: str) -> torch.dtype:
    """The torch dtype holding ``dtype``'s bytes, or ArraySampleError naming ``path``."""
    try:
        return torch.from_numpy(np.empty(0, dtype=dtype)).dtype
    except (TypeError, ValueError) as exc:
        raise ArraySampleError(f"sample {path} holds {dtype}, which torch has no dtype for", path) from exc
