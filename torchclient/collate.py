"""Batching samples, with an error that says what to do when they differ in shape.

torch's ``default_collate`` stacks a batch's tensors; samples of different shapes (images of
different sizes, raw bytes of different lengths) fail there with ``RuntimeError: stack expects
each tensor to be equal size`` or, in a worker process, ``Trying to resize storage that is not
resizable``, which names neither the samples nor the fix. :func:`collate` is ``default_collate``
with that failure turned into a :class:`BatchShapeError` that lists the shapes and names the two
fixes: a ``transform`` that gives every sample one shape (a resize, a crop), or a ``collate_fn``
(a list of samples, padding). Samples holding different names (``.npz`` files with different
members) are a :class:`BatchMembersError` naming a file of each, never a batch that silently
lacks a member. The loaders use it unless given a ``collate_fn``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import default_collate

from .npyheader import NpzMemberError


class BatchMembersError(NpzMemberError):
    """Samples of one batch hold different names (``.npz`` members, a dict's keys); the message
    names the sample that differs from the batch's first, both name sets and the fixes. torch's
    ``default_collate`` takes the first sample's names: a member only later samples hold is dropped
    without a word, one the first holds and a later one lacks fails, so what a batch holds would
    depend on the shuffle. An ``NpzMemberError`` (a KeyError) as a sample lacking a member always
    was; ``.path`` is the sample that differs (None where the samples know no file).

    Constructible from one message string, so the DataLoader re-raises it in the training process."""


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


_LEAVES = (str, bytes, int, float, torch.Tensor, type(None))
"""What holds no mapping: told apart before the ABC checks, as a sample of token lists is
thousands of them a batch (the check ran longer than ``default_collate`` there)."""


def _names(sample: Any, where: str = "") -> list[tuple[str, Any]]:
    """(where in the sample, the mapping there) of each mapping a sample holds (an ``.npz``
    sample's dict of arrays, a dict inside an ``(x, label)`` tuple)."""
    if isinstance(sample, _LEAVES):
        return []
    if isinstance(sample, Mapping):
        inner = (s for key, value in sample.items() for s in _names(value, f"{where}[{key!r}]"))
        return [(where, sample), *inner]
    if isinstance(sample, Sequence):
        return [s for i, value in enumerate(sample) if not isinstance(value, _LEAVES)
                for s in _names(value, f"{where}[{i}]")]
    return []


def _path(sample: Any) -> str | None:
    """The file of a sample where it knows it (an ``.npz`` sample's ``path``)."""
    return str(getattr(sample, "path", "")) or None


def _which(sample: Any, index: int) -> str:
    path = _path(sample)
    return f"sample {path}" if path else f"sample {index} of the batch"


def _members_error(first: tuple[int, Any], other: tuple[int, Any], where: str) -> BatchMembersError:
    """The error for ``other`` (index, mapping), whose names differ from the batch's ``first``."""
    a, b = sorted(map(str, first[1])), sorted(map(str, other[1]))
    missing, extra = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    at = f" at {where}" if where else ""
    head = (f"{_which(other[1], other[0])} has no array {missing[0]!r}{at} (it holds {b})" if missing
            else f"{_which(other[1], other[0])} holds {extra}{at}, which the batch's first sample lacks")
    return BatchMembersError(
        f"{head}; {_which(first[1], first[0])} holds {a}: cannot batch samples that hold different "
        f"arrays (only one of them: {sorted(set(a) ^ set(b))}). Give every sample the same names with "
        f"transform= (e.g. lambda s: {{k: s[k] for k in {sorted(set(a) & set(b))!r}}}), or batch them "
        "another way with collate_fn= (collate_fn=list keeps each batch a list of samples)",
        _path(other[1]))


def check_members(batch: Sequence[Any]) -> None:
    """:class:`BatchMembersError` when the samples of ``batch`` hold mappings of different names at
    one place (each sample's names against the first's)."""
    first: dict[str, tuple[int, Any]] = {}
    for index, sample in enumerate(batch):
        for where, mapping in _names(sample):
            seen = first.setdefault(where, (index, mapping))
            if mapping.keys() != seen[1].keys():
                raise _members_error(seen, (index, mapping), where)


def collate(batch: list[Any]) -> Any:
    """``default_collate``, with samples of different shapes reported as a :class:`BatchShapeError`
    and samples of different names (``.npz`` members) as a :class:`BatchMembersError`."""
    check_members(batch)
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
