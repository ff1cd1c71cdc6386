"""The synthetic S3 endpoint's bucket (:mod:`epochfs.benchmarks.synthetic_s3`): keys and bodies
computed from a key's position, so 10M keys cost no memory.

**Keys.** ``count`` keys, flat (``{prefix}sample-00000042.bin``) or in ``classes`` class folders
(``{prefix}class-0007/sample-00012345.bin``, sample ``i`` in class ``i % classes``, as datasets
keep one class per folder so that the first pages of a listing hold one class). The key at each
position of the sorted listing is a formula, so a page is found by bisection over positions.

**Bodies.** ``size`` bytes: a fixed random filler followed by 16 bytes of ``blake2b(key)``, so every
object differs, and its ETag (the md5 of the body, as S3's for a single-part upload) costs an md5
state copy and one 16-byte update, not an md5 of the whole body: a listing page of 1,000 keys costs
the server about as much as the XML.
"""

from __future__ import annotations

import bisect
import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

_TAIL = 16  # bytes of blake2b(key) at the end of each body


class Bucket(Protocol):
    """What the endpoint serves: :class:`Dataset`, or a shaped ``_keyspaces.KeySpace``."""

    @property
    def count(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def prefix(self) -> str: ...
    @property
    def bucket(self) -> str: ...
    def key(self, pos: int) -> str: ...
    def keys(self) -> Sequence[str]: ...
    def position(self, key: str) -> int | None: ...
    def body(self, key: str) -> bytes: ...
    def etag(self, key: str) -> str: ...


@dataclass(frozen=True)
class Dataset:
    """The procedural bucket: ``count`` keys of ``size`` bytes under ``prefix``."""

    count: int
    size: int = 16 * 1024
    classes: int = 0
    """Class folders (0: flat keys)."""
    prefix: str = ""
    """Before every key, e.g. ``train/`` (a folder) or empty."""
    bucket: str = "bench"
    _filler: bytes = field(default=b"", repr=False, compare=False)
    _md5: Any = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.count < 0 or self.size < 0 or self.classes < 0:
            raise ValueError("count, size and classes must not be negative")
        filler = random.Random(1234).randbytes(max(0, self.size - _TAIL))
        object.__setattr__(self, "_filler", filler)
        object.__setattr__(self, "_md5", hashlib.md5(filler))

    # ------------------------------------------------------------------ keys
    def key(self, pos: int) -> str:
        """The key at position ``pos`` (0-based) of the sorted listing."""
        if not self.classes:
            return f"{self.prefix}sample-{pos:08d}.bin"
        per, extra = divmod(self.count, self.classes)
        # Classes below ``extra`` hold per + 1 samples; class c starts at c * per + min(c, extra).
        big = extra * (per + 1)
        if pos < big:
            cls, m = divmod(pos, per + 1)
        else:
            cls, m = divmod(pos - big, per) if per else (extra, 0)
            cls += extra
        return f"{self.prefix}class-{cls:04d}/sample-{m * self.classes + cls:08d}.bin"

    def keys(self) -> _Keys:
        """The sorted keys as a sequence (computed on access), for bisection."""
        return _Keys(self)

    def position(self, key: str) -> int | None:
        """The position of ``key``, or None when the bucket has no such key."""
        keys = self.keys()
        pos = bisect.bisect_left(keys, key)
        return pos if pos < self.count and keys[pos] == key else None

    # ------------------------------------------------------------------ bodies
    def body(self, key: str) -> bytes:
        tail = hashlib.blake2b(key.encode(), digest_size=_TAIL).digest()
        return (self._filler + tail)[-self.size:] if self.size else b""

    def etag(self, key: str) -> str:
        """The md5 of :meth:`body` (from the filler's precomputed md5 state)."""
        if self.size < _TAIL:
            return hashlib.md5(self.body(key)).hexdigest()
        md5 = self._md5.copy()
        md5.update(hashlib.blake2b(key.encode(), digest_size=_TAIL).digest())
        return str(md5.hexdigest())


class Positional(Protocol):
    """A bucket whose sorted keys are computed from their positions."""

    @property
    def count(self) -> int: ...

    def key(self, pos: int) -> str: ...


class _Keys(Sequence[str]):
    """A bucket's sorted keys as a read-only sequence (``bisect`` works on it)."""

    def __init__(self, dataset: Positional) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return self.dataset.count

    def __getitem__(self, pos: Any) -> Any:
        if isinstance(pos, slice):
            return [self.dataset.key(i) for i in range(*pos.indices(len(self)))]
        if pos < 0:
            pos += len(self)
        if not 0 <= pos < len(self):
            raise IndexError(pos)
        return self.dataset.key(pos)


__all__ = ["Bucket", "Dataset", "Positional", "SortedKeys"]

SortedKeys = _Keys
"""The sequence of a :class:`Positional` bucket's keys (shared by the key spaces)."""
