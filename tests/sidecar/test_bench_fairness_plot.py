"""The fairness plot (benchmarks/_fairness_plot.py): one line per key space and run, on a log axis
where a random sample's TV is the floor and the aim (2x) is drawn."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from epochfs.benchmarks._fairness_plot import svg


def _row(shape: str, at: float, tv: float) -> dict[str, object]:
    return {"shape": shape, "at_s": at, "tv_ratio": tv}


def test_each_key_space_is_a_line_and_the_before_run_is_dotted() -> None:
    after = [_row("equal", 2.0, 1.0), _row("equal", 4.0, 2.0), _row("flat", 2.0, 8.0), _row("flat", 4.0, 4.0)]
    before = [_row("equal", 2.0, 4.0), _row("equal", 4.0, 8.0)]
    root = ET.fromstring(svg(after, before, title="t"))
    lines = root.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 3 and sum(1 for p in lines if p.get("stroke-dasharray")) == 1
    equal = next(p for p in lines if not p.get("stroke-dasharray") and p.get("stroke") == "#1f77b4")
    (x1, y1), (x2, y2) = (tuple(map(float, pt.split(","))) for pt in equal.get("points", "").split())
    assert x2 > x1 and y2 < y1  # later to the right; a higher ratio higher up
    assert any(t.text == "2x" for t in root.iter("{http://www.w3.org/2000/svg}text"))
