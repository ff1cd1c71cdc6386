"""Shaped key spaces for the synthetic S3 endpoint (:mod:`epochfs.benchmarks.synthetic_s3`): the
folder layouts real datasets have, for measuring how fair a sample drawn while listing is
(:mod:`epochfs.benchmarks.fairness`).

A :class:`KeySpace` offers what the server uses of ``_synthetic_data.Dataset`` (``count``, ``size``,
``prefix``, ``bucket``, ``key(pos)``, ``keys()``, ``position(key)``, ``body(key)``, ``etag(key)``).
It is a list of leaf folders sorted by their path, each holding ``files`` files named
``{stem}-{index:0Nd}{ext}``, and a cumulative count over them: the key at a position is a bisection
over the folders (no list of keys is kept, so 1M or 10M keys cost a few folders' worth of memory),
and a key's position a dictionary look-up of its folder. No folder path is a prefix of another, so
the folders sorted by path, each in index order, are the keys sorted by UTF-8 bytes, as S3 lists.

Shapes (:data:`SHAPES`; ``keys`` is N, ``folders`` F):

- ``equal``: F class folders (default 100) of N/F keys: ``class-0007/sample-000012.bin``;
- ``skewed``: F class folders (default 100) of Zipf-like sizes (size of the r-th largest ~
  ``r**-skew``, skew 1.1 by default: a few folders hold most keys, many hold a few dozen), in a
  seeded random order, so the big ones are anywhere in key order;
- ``nested``: F class folders (default 10) each with a seeded number of sub-folders (1 to
  2 x ``subfolders`` - 1, mean ``subfolders`` = 20) of lognormal sizes (sigma ``skew``, 1.0):
  ``class-0003/video-0012/frame-000123.bin``;
- ``many``: F folders (default 5,000) of N/F keys (``skew`` > 0: Zipf-like as ``skewed``);
- ``flat``: no folders, ``sample-000042.bin``;
- ``mixed``: ``arrays/`` (``array-*.npy``) beside ``train/class-0`` ... ``train/class-4``
  (``img-*.png``), 500 : 1,000 each (9% of the keys in ``arrays/``), scaled to N;
- ``bigtiny``: one big folder ``m-big/`` beside F tiny folders (default 300) of :data:`TINY_FILES`
  keys each, half of them sorting before it (``a-tiny-0007/``) and half after (``z-tiny-0007/``);
  the big folder holds the rest of the N keys (92% of 10,900). One large ``images/`` or class
  folder beside many small metadata or rare-class folders: the listing's first round reaches
  the big folder at a random point among hundreds of first pages, and an epoch drawn before it
  is reached holds none of most of the data.
- ``trainval``: ``train/`` (94% of the keys) beside ``val/`` (6%), ``img-*.jpg``: two top
  folders, where one folder listed whole is no typical size to judge the other by.

**Strata** (what a key counts in for the fairness metrics; :meth:`KeySpace.strata`), always runs
of consecutive positions: at the ``top`` level the class folder (``class-0003/``; for ``mixed``
``arrays/`` or ``train/class-k/``; for ``flat`` the decile of the key's position), at the ``leaf``
level the folder that holds the file (``nested``: ``class-0003/video-0012/``; ``flat``: deciles).

A key space travels to the endpoint's process as a spec, ``skewed:keys=100000,folders=100,...``
(:meth:`Shape.spec`, :func:`parse_spec`; ``synthetic_s3 --keyspace SPEC``): the same spec builds
the same keys in both processes.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, NamedTuple

from epochfs.benchmarks._synthetic_data import Dataset, SortedKeys

SHAPES = ("equal", "skewed", "nested", "many", "flat", "mixed", "bigtiny", "trainval")
DEFAULTS: dict[str, dict[str, float]] = {
    "equal": {"folders": 100, "skew": 0.0},
    "skewed": {"folders": 100, "skew": 1.1},
    "nested": {"folders": 10, "skew": 1.0, "subfolders": 20},
    "many": {"folders": 5000, "skew": 0.0},
    "flat": {},
    "mixed": {},
    "bigtiny": {"folders": 300},
    "trainval": {},
}
"""Each shape's parameters where a :class:`Shape` leaves them None."""
MIXED = (("arrays/", "array", ".npy", 500), *((f"train/class-{k}/", "img", ".png", 1000) for k in range(5)))
"""``mixed``: (folder, stem, extension, share) of each folder."""
TRAINVAL = (("train/", "img", ".jpg", 94), ("val/", "img", ".jpg", 6))
"""``trainval``: (folder, stem, extension, share) of each folder."""
TABLES = {"mixed": MIXED, "trainval": TRAINVAL}
"""The shapes whose folders are a fixed table, scaled to the keys."""
DECILES = 10
TINY_FILES = 3
"""``bigtiny``: keys in each tiny folder."""


class Folder(NamedTuple):
    """A leaf folder: ``files`` files ``{path}{stem}-{index}{ext}``, counted in stratum ``top``."""

    path: str
    stem: str
    ext: str
    files: int
    top: str


@dataclass(frozen=True)
class Shape:
    """A key space's parameters (None: the shape's default, :data:`DEFAULTS`)."""

    name: str
    keys: int
    folders: int | None = None
    skew: float | None = None
    subfolders: int | None = None
    seed: int = 0
    size: int = 4096
    """Bytes per object."""

    def __post_init__(self) -> None:
        if self.name not in SHAPES:
            raise ValueError(f"unknown key space shape {self.name!r} (known: {', '.join(SHAPES)})")
        if self.keys < 1 or self.size < 0 or (self.folders is not None and self.folders < 1):
            raise ValueError("a key space needs at least one key and one folder, and a size >= 0")

    def param(self, name: str) -> float:
        value = getattr(self, name)
        return float(DEFAULTS[self.name].get(name, 0) if value is None else value)

    def spec(self) -> str:
        """``name:field=value,...`` (the fields that are set), for :func:`parse_spec`."""
        items = [f"{f.name}={getattr(self, f.name)}" for f in fields(self)
                 if f.name != "name" and getattr(self, f.name) is not None]
        return f"{self.name}:{','.join(items)}"


def parse_spec(text: str) -> Shape:
    """The :class:`Shape` of :meth:`Shape.spec`'s text (ValueError for anything else)."""
    name, _, rest = text.partition(":")
    types = {"keys": int, "folders": int, "skew": float, "subfolders": int, "seed": int, "size": int}
    values: dict[str, Any] = {}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep or key not in types:
            raise ValueError(f"bad key space field {item!r} in {text!r}")
        values[key] = types[key](value)
    if "keys" not in values:
        raise ValueError(f"key space {text!r} has no keys=")
    return Shape(name, **values)


# ---------------------------------------------------------------------------------- shapes
def apportion(total: int, weights: Sequence[float]) -> list[int]:
    """``total`` split over ``weights`` (largest remainders), each part at least 1."""
    if total < len(weights):
        raise ValueError(f"{total} keys cannot fill {len(weights)} folders")
    spare = total - len(weights)
    whole = sum(weights)
    raw = [spare * w / whole for w in weights]
    parts = [int(r) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: parts[i] - raw[i])[:spare - sum(parts)]:
        parts[i] += 1
    return [p + 1 for p in parts]


def zipf_weights(count: int, skew: float, rng: random.Random) -> list[float]:
    """``(r + 1) ** -skew`` for ranks r in a random order (all 1.0 for skew 0)."""
    weights = [(r + 1) ** -skew for r in range(count)]
    if skew:
        rng.shuffle(weights)
    return weights


def _digits(n: int, least: int = 4) -> int:
    return max(least, len(str(max(0, n - 1))))


def folders(shape: Shape) -> list[Folder]:
    """The leaf folders of ``shape`` (in any order)."""
    rng = random.Random(shape.seed)
    n = shape.keys
    count = min(n, int(shape.param("folders")))
    if shape.name == "flat":
        return [Folder("", "sample", ".bin", n, "")]
    if (table := TABLES.get(shape.name)) is not None:
        parts = apportion(n, [m[3] for m in table]) if n >= len(table) else [n]
        return [Folder(path, stem, ext, c, path)
                for (path, stem, ext, _), c in zip(table, parts, strict=False)]
    if shape.name == "bigtiny":
        return _big_beside_tiny(n, count)
    if shape.name in ("equal", "skewed", "many"):
        sizes = apportion(n, zipf_weights(count, shape.param("skew"), rng))
        width = _digits(count)
        return [Folder(f"class-{i:0{width}d}/", "sample", ".bin", c, f"class-{i:0{width}d}/")
                for i, c in enumerate(sizes)]
    # nested: classes of sub-folders, the leaves' sizes lognormal
    mean = max(1, int(shape.param("subfolders")))
    subs = [rng.randint(1, 2 * mean - 1) for _ in range(count)]
    if sum(subs) > n:  # fewer keys than leaves: fewer sub-folders, at least one per class
        subs = [max(1, s * n // sum(subs)) for s in subs]
        while sum(subs) > n:
            subs[subs.index(max(subs))] -= 1
    sigma = shape.param("skew")
    sizes = apportion(n, [rng.lognormvariate(0.0, sigma) for _ in range(sum(subs))])
    cw, vw = _digits(count), _digits(max(subs))
    leaves = iter(sizes)
    return [Folder(f"class-{c:0{cw}d}/video-{v:0{vw}d}/", "frame", ".bin", next(leaves), f"class-{c:0{cw}d}/")
            for c, s in enumerate(subs) for v in range(s)]


def _big_beside_tiny(n: int, tiny: int) -> list[Folder]:
    """``bigtiny``: ``m-big/`` holding what ``tiny`` folders of :data:`TINY_FILES` keys leave of
    ``n`` (fewer tiny folders where ``n`` is too small for them all: the big one keeps a key)."""
    tiny = min(tiny, (n - 1) // TINY_FILES)
    width = _digits(tiny)
    sides = [("a" if i < tiny // 2 else "z", i) for i in range(tiny)]
    small = [Folder(f"{side}-tiny-{i:0{width}d}/", "s", ".bin", TINY_FILES, f"{side}-tiny-{i:0{width}d}/")
             for side, i in sides]
    return [*small, Folder("m-big/", "s", ".bin", n - TINY_FILES * tiny, "m-big/")]


# ---------------------------------------------------------------------------------- key space
class KeySpace:
    """The procedural bucket of a :class:`Shape`: keys from positions through its folders."""

    prefix = ""
    """Before every key (the server's ``url`` names the bucket alone)."""

    def __init__(self, shape: Shape, *, bucket: str = "bench") -> None:
        self.shape = shape
        self.bucket = bucket
        self.size = shape.size
        self.folders = sorted(folders(shape), key=lambda f: f.path.encode())
        for a, b in zip(self.folders, self.folders[1:], strict=False):
            if b.path.startswith(a.path):
                raise ValueError(f"folder {a.path!r} holds folder {b.path!r}: keys would interleave")
        self.starts = [0]
        for f in self.folders:
            self.starts.append(self.starts[-1] + f.files)
        self.count = self.starts[-1]
        self.width = _digits(max(f.files for f in self.folders), least=6)
        self._index = {f.path: i for i, f in enumerate(self.folders)}
        self._bodies = Dataset(0, shape.size, bucket=bucket)  # bodies and ETags as the plain bucket's

    def __repr__(self) -> str:
        return f"KeySpace({self.shape.spec()})"

    # ------------------------------------------------------------------ keys
    def key(self, pos: int) -> str:
        """The key at position ``pos`` (0-based) of the sorted listing."""
        if not 0 <= pos < self.count:
            raise IndexError(pos)
        i = bisect.bisect_right(self.starts, pos) - 1
        f = self.folders[i]
        return f"{f.path}{f.stem}-{pos - self.starts[i]:0{self.width}d}{f.ext}"

    def keys(self) -> SortedKeys:
        """The sorted keys as a sequence (computed on access), for bisection."""
        return SortedKeys(self)

    def position(self, key: str) -> int | None:
        """The position of ``key``, or None when the bucket has no such key."""
        cut = key.rfind("/") + 1
        i = self._index.get(key[:cut])
        if i is None:
            return None
        f = self.folders[i]
        number = key[cut + len(f.stem) + 1:len(key) - len(f.ext)]
        if len(number) != self.width or not number.isdigit() or not number.isascii():
            return None
        j = int(number)
        if j >= f.files or key != self.key(self.starts[i] + j):
            return None
        return self.starts[i] + j

    # ------------------------------------------------------------------ strata
    def strata(self, level: str = "top") -> tuple[list[str], list[int]]:
        """(names, bounds) of the strata at ``level`` (``top`` or ``leaf``): stratum s holds the
        positions ``bounds[s]`` to ``bounds[s + 1] - 1``; ``flat`` has deciles of the positions."""
        if level not in ("top", "leaf"):
            raise ValueError(f"stratum level {level!r}: top or leaf")
        if self.shape.name == "flat":
            bounds = sorted({self.count * d // DECILES for d in range(DECILES + 1)})
            return [f"decile-{d}" for d in range(len(bounds) - 1)], bounds
        names: list[str] = []
        bounds = [0]
        for f, end in zip(self.folders, self.starts[1:], strict=True):
            name = f.top if level == "top" else f.path
            if names and names[-1] == name:
                bounds[-1] = end
            else:
                names.append(name)
                bounds.append(end)
        return names, bounds

    def stratum(self, key: str, level: str = "top") -> str | None:
        """The name of the stratum ``key`` counts in (None for no key of the bucket)."""
        pos = self.position(key)
        if pos is None:
            return None
        names, bounds = self.strata(level)
        return names[bisect.bisect_right(bounds, pos) - 1]

    # ------------------------------------------------------------------ bodies
    def body(self, key: str) -> bytes:
        return self._bodies.body(key)

    def etag(self, key: str) -> str:
        return self._bodies.etag(key)


def build(name: str, keys: int, **params: Any) -> KeySpace:
    """The key space of shape ``name`` with ``keys`` keys (other :class:`Shape` fields as keywords)."""
    return KeySpace(Shape(name, keys, **params))


def with_defaults(shape: Shape) -> Shape:
    """``shape`` with its shape's defaults written in (what its spec then records)."""
    values: dict[str, Any] = {k: int(v) if k in ("folders", "subfolders") else float(v)
                              for k, v in DEFAULTS[shape.name].items() if getattr(shape, k) is None}
    return replace(shape, **values)


__all__ = ["DEFAULTS", "SHAPES", "Folder", "KeySpace", "Shape", "apportion", "build", "folders",
           "parse_spec", "with_defaults", "zipf_weights"]
