"""Batching samples, with an error that says what to do when they differ in shape.

torch's ``default_collate`` stacks a batch's tensors; samples of different shapes (images of
different sizes, raw bytes of different lengths) fail there with ``RuntimeError: stack expects
each tensor to be equal size`` or, in a worker process, ``Trying to resize storage that is not
resizable``, which names neither the samples nor the fix. :func:`collate` is ``default_collate``
with that failure turned into a :class:`BatchShapeError` that lists the shapes and names the two
fixes: a ``transform`` that gives every sample one shape (a resize, a crop), or a ``collate_fn``
(a list of samples, padding). The loaders use it unless given a ``collate_fn``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import default_collate


class BatchShapeError(ValueError):
    """Samples of one batch differ in shape; the message lists the shapes and the fixes.

    Constructible from one message string, so the DataLoader re-raises it in the training process."""


def _shapes(sample: Any, where: str = "") -> list[tuple[str, tuple[int, ...]]]:
    """(where in the sample, shape) of each tensor a sample holds (a tensor, a tuple such as
    (image, label), a dict of tensors)."""
    if isinstance(sample, torch.Tensor):
        return [(where, tuple(sample.shape))]
    if isinstance(sample, Mapping):
        return [s for key, value in sample.items() for s in _shapes(value, f"{where}[{key!r}]")]
    if isinstance(sample, Sequence) and not isinstance(sample, (str, bytes)):
        return [s for i, value in enumerate(sample) for s in _shapes(value, f"{where}[{i}]")]
    return []


def describe_mismatch(batch: Sequence[Any]) -> str | None:
    """What differs among the samples of ``batch`` (None: every tensor has one shape per place)."""
    by_place: dict[str, list[tuple[int, ...]]] = {}
    for sample in batch:
        for where, shape in _shapes(sample):
            by_place.setdefault(where, []).append(shape)
    for where, shapes in by_place.items():
        distinct = sorted(set(shapes))
        if len(distinct) > 1:
            listed = ", ".join(str(s) for s in distinct[:6]) + (" ..." if len(distinct) > 6 else "")
            return (f"the samples{(' ' + where) if where else ''} of this batch have {len(distinct)} "
                    f"different shapes ({listed})")
    return None


def collate(batch: list[Any]) -> Any:
    """``default_collate``, with samples of different shapes reported as a :class:`BatchShapeError`."""
    try:
        return default_collate(batch)
    except RuntimeError as exc:
        what = describe_mismatch(batch)
        if what is None:
            raise
        raise BatchShapeError(
            f"cannot stack a batch: {what}. Give every sample one shape with transform= (for "
            "images, a resize or crop such as torchvision.transforms.v2.Resize((224, 224)) or "
            "lambda img: torch.nn.functional.interpolate(img[None].float(), size=(224, 224))[0]), "
            "or batch them another way with collate_fn= (collate_fn=list keeps each batch a list "
            "of samples)") from exc
