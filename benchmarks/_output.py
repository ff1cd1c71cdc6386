"""The printed results of the benchmarks: :class:`Table` (a header and rows from one list of column
formats) and :func:`times` (the ``0.97x`` of every ratio printed).

Apart from :mod:`.harness` (processes, mounts, S3, scratch, the files a benchmark writes), which
re-exports these names: every benchmark calls them as ``harness.<name>``. Standard library only.
"""

from __future__ import annotations

import re


def times(ratio: float) -> str:
    """A ratio as every benchmark prints it: ``0.97x``."""
    return f"{ratio:.2f}x"


class Table:
    """Rows of values under a header, columns joined by one space. Each column is (title, format
    spec of its values: ``8s``, ``>9.2f``, ``9.0%``); a title takes its column's width and alignment
    (the spec's, else left for text and right for numbers, as format() aligns values)."""

    def __init__(self, *columns: tuple[str, str]) -> None:
        self.columns = columns

    def header(self) -> str:
        heads = []
        for title, spec in self.columns:
            m = re.fullmatch(r"([<>^]?)(\d*).*?([a-z%]?)", spec)
            align, width, kind = m.groups() if m else ("", "", "")
            heads.append(f"{title:{align or ('<' if kind == 's' else '>')}{width}}")
        return " ".join(heads)

    def row(self, *values: object) -> str:
        return " ".join(f"{v:{spec}}" for (_, spec), v in zip(self.columns, values, strict=True))
