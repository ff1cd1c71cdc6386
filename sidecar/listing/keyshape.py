"""Where a key lies in its span, as a number: the listing's measure of how much is left to list.

A listing that is to spread over the key space early has to guess, from the keys it has seen, how
many keys lie in a stretch it has not listed yet, and where the middle of that stretch is (S3's
``StartAfter`` takes any string, so a page can start anywhere). Keys of one folder usually share a
shape: ``sample-00001234.bin``, ``frame_000123.jpg``, ``3f2a9c...npy``. :class:`KeyShape` learns
it from listed keys, one alphabet per character position: a position where only one character was
seen is a constant (a digit stays a digit: numbers grow), any other position takes the smallest of
a few alphabets holding what was seen (digits, hex, lower case, alphanumerics, printable ASCII).
A key is then a number in that mixed radix (:meth:`KeyShape.number`), the span's keys are dense or
sparse along it, and a number turns back into a string that sorts where it should
(:meth:`KeyShape.key`).

The mapping never decides *what* is listed, only in which order: a wrong guess costs a page that
comes back empty or a split in a poor place, never a key. It is monotone (a key that sorts after
another never maps to a smaller number), which is all the listing's estimates need of it. Numbers
of two shapes do not compare: a wider alphabet makes every number many times larger, so the keys
per number measured in one shape are measured again in the next (:func:`.learning.remeasure`;
kept, names of three shapes in a folder, ``new0042.bin``, ``s000123.bin``, ``zz006.bin``, had the
listing estimate 6,470 keys at 763M). Names of several shapes spread unevenly along the numbers
(none between a folder's last name and the next names used), which the estimates bound by what
the pages found past such a stretch (:data:`.segments.GAP_APART`).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

ALPHABETS = (
    "0123456789",
    "0123456789abcdef",
    "0123456789ABCDEF",
    "abcdefghijklmnopqrstuvwxyz",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "0123456789abcdefghijklmnopqrstuvwxyz",
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    "".join(chr(c) for c in range(0x20, 0x7F)),
)
"""The alphabets a varying position may take, smallest first (each sorted by code point)."""
MAX_POSITIONS = 48
"""Positions learnt at most: keys past it are equal for the measure (their order still holds)."""
FULL = "".join(chr(c) for c in range(0x20, 0x7F))


def _alphabet(seen: set[str]) -> str:
    if len(seen) == 1:
        (c,) = seen
        return "0123456789" if c.isdigit() and c.isascii() else c
    for alphabet in ALPHABETS:
        if seen.issubset(alphabet):
            return alphabet
    return FULL


@dataclass(frozen=True)
class KeyShape:
    """Mixed-radix positions learnt from keys relative to a span's prefix (see the module doc)."""

    alphabets: tuple[str, ...]

    @classmethod
    def learn(cls, keys: Iterable[str], seen: list[set[str]] | None = None) -> KeyShape:
        """The shape of ``keys`` (relative to the span's prefix): one alphabet a position, as
        long as the longest key (at most :data:`MAX_POSITIONS`). ``seen``: the characters seen
        at each position so far, updated in place (a shape learnt page by page)."""
        seen = [] if seen is None else seen
        for key in keys:
            for i, c in enumerate(key[:MAX_POSITIONS]):
                if i == len(seen):
                    seen.append(set())
                seen[i].add(c)
        return cls(tuple(_alphabet(s) for s in seen))

    @property
    def size(self) -> int:
        """One past the largest number: the extent of the space the shape describes."""
        n = 1
        for a in self.alphabets:
            n *= len(a)
        return n

    def number(self, key: str | None) -> int:
        """The position of ``key`` along the shape's space; None (the span's end) is :attr:`size`.

        Position by position: the index of the key's character in that position's alphabet; a
        character below the alphabet makes the rest the lowest (the key sorts before every key of
        the shape that agrees so far), above it the rest the highest; a key that ends early pads
        with the lowest."""
        if key is None:
            return self.size
        n = 0
        fill: int | None = None  # None: follow the key; 0 / -1: the lowest / highest from here
        for i, alphabet in enumerate(self.alphabets):
            radix = len(alphabet)
            if fill is None and i < len(key):
                c = key[i]
                j = bisect.bisect_left(alphabet, c)
                if j < radix and alphabet[j] == c:
                    digit = j
                elif j == 0:
                    digit, fill = 0, 0
                else:
                    digit, fill = j - 1, -1  # between two letters or above all: its floor, then max
            elif fill == -1:
                digit = radix - 1
            else:
                digit = 0
                fill = 0 if fill is None else fill
            n = n * radix + digit
        return n

    def key(self, number: int) -> str:
        """The string at ``number`` (clamped to the space): a ``StartAfter`` that sorts between the
        keys whose numbers are around it."""
        number = max(0, min(number, self.size - 1))
        chars = []
        for alphabet in reversed(self.alphabets):
            number, digit = divmod(number, len(alphabet))
            chars.append(alphabet[digit])
        return "".join(reversed(chars))


__all__ = ["KeyShape"]
