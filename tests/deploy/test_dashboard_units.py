"""The shipped Grafana dashboard in base units, one unit per axis (issue 23): byte rates in ``Bps``
(Grafana scales them; a ``/ 1e6`` "MBs" hid the unit in the query), and a panel that shows two
kinds of series puts the second on a right axis with its own unit, never samples/s and bytes/s on
one axis."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "helm" / "epochfs" / "dashboards" / "epochfs.json"


def _units(panel: dict[str, Any]) -> dict[str, tuple[str, bool]]:
    """Each target's (unit, on the right axis) as Grafana applies the panel's overrides by query."""
    config = panel.get("fieldConfig", {})
    default = str(config.get("defaults", {}).get("unit", ""))
    out = {}
    for target in panel.get("targets", []):
        unit, right = default, False
        for override in config.get("overrides", []):
            matcher = override.get("matcher", {})
            if matcher.get("id") == "byFrameRefID" and matcher.get("options") == target["refId"]:
                for prop in override.get("properties", []):
                    if prop["id"] == "unit":
                        unit = str(prop["value"])
                    elif prop["id"] == "custom.axisPlacement":
                        right = prop["value"] == "right"
        out[target["refId"]] = (unit, right)
    return out


def _panels() -> list[dict[str, Any]]:
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p.get("targets")]


def test_byte_rates_are_in_base_units() -> None:
    for panel in _panels():
        units = _units(panel)
        for target in panel["targets"]:
            expr = target["expr"]
            assert "1e6" not in expr and "1e9" not in expr, (panel["title"], expr)
            if "rate(" in expr and "_bytes_total" in expr:
                assert units[target["refId"]][0] == "Bps", (panel["title"], target["refId"])


def _quantity(expr: str) -> str:
    """What a series measures, as far as an axis cares: bytes, or a count of something."""
    return "bytes" if "_bytes" in expr else "count"


def test_no_axis_mixes_units() -> None:
    """Samples/s beside bytes/s on one axis (the served and eviction panels did) reads as one
    quantity; each axis has one unit and one kind of quantity."""
    for panel in _panels():
        if panel.get("type") != "timeseries":
            continue
        units = _units(panel)
        axes: dict[bool, set[tuple[str, str]]] = {}
        for target in panel["targets"]:
            unit, right = units[target["refId"]]
            axes.setdefault(right, set()).add((unit, _quantity(target["expr"])))
        assert all(len(kinds) == 1 for kinds in axes.values()), (panel["title"], axes)
