"""The shipped Grafana dashboard in base units, one unit per axis (issue 23): byte rates in ``Bps``
(Grafana scales them; a ``/ 1e6`` "MBs" hid the unit in the query), and a panel that shows two
kinds of series puts the second on a right axis with its own unit, never samples/s and bytes/s on
one axis, nor a per-second ``rate()`` beside an ``increase()`` count per window (the errors panel
did: child restarts per window on a unitless axis of errors per second)."""

from __future__ import annotations

import copy
import json
import re
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


def _per(expr: str) -> str:
    """Over what a series counts: per second (``rate``, ``irate``), per window (``increase``,
    ``delta``...: its size is the range's), a quantile of a histogram, or a value as it is."""
    if "histogram_quantile(" in expr:
        return "quantile"
    window = bool(re.search(r"\b(increase|delta|idelta|changes|resets|sum_over_time|count_over_time)\(",
                            expr))
    per_second = bool(re.search(r"\b(rate|irate|deriv)\(", expr))
    if window and per_second:
        return "mixed"
    return "window" if window else "second" if per_second else "value"


PER_SECOND_UNITS = {"ops", "reqps", "rps", "wps", "iops", "Bps", "binBps", "decbytes/s"}


def _axes(panel: dict[str, Any]) -> dict[bool, set[tuple[str, str, str]]]:
    """(unit, quantity, per) of the series on each axis (False: left, True: right)."""
    units = _units(panel)
    axes: dict[bool, set[tuple[str, str, str]]] = {}
    for target in panel["targets"]:
        unit, right = units[target["refId"]]
        axes.setdefault(right, set()).add((unit, _quantity(target["expr"]), _per(target["expr"])))
    return axes


def _mixed_axes(panel: dict[str, Any]) -> dict[bool, set[tuple[str, str, str]]]:
    return {right: kinds for right, kinds in _axes(panel).items()
            if len(kinds) > 1 or any(per == "mixed" for _, _, per in kinds)}


def test_no_axis_mixes_units() -> None:
    """Samples/s beside bytes/s on one axis (the served and eviction panels did) reads as one
    quantity, and so does a per-second rate() beside an increase() per window; each axis has one
    unit, one kind of quantity and one time base."""
    for panel in _panels():
        if panel.get("type") != "timeseries":
            continue
        assert not _mixed_axes(panel), (panel["title"], _axes(panel))


def test_the_axis_check_catches_rate_beside_increase() -> None:
    """The errors panel as it was: rates, and child restarts as increase() on the same axis."""
    [errors] = [p for p in _panels() if p["title"] == "Errors by kind"]
    mixed = copy.deepcopy(errors)
    [restarts] = [t for t in mixed["targets"] if "epochfs_child_restarts_total" in t["expr"]]
    restarts["expr"] = restarts["expr"].replace("rate(", "increase(")
    assert _mixed_axes(mixed) == {False: {("ops", "count", "second"), ("ops", "count", "window")}}
    one_series = copy.deepcopy(errors)
    one_series["targets"] = [{"refId": "A",
                              "expr": "rate(epochfs_cuts_total[5m]) + increase(epochfs_cuts_total[5m])"}]
    assert _mixed_axes(one_series)


def test_rates_of_counts_have_a_per_second_unit() -> None:
    """A rate() of a count on an axis labelled "short" reads as a count; every axis of per-second
    series says per second (ops, reqps...; bytes in Bps; seconds per second are a share)."""
    for panel in _panels():
        if panel.get("type") != "timeseries":
            continue
        units = _units(panel)
        for target in panel["targets"]:
            if _per(target["expr"]) == "second" and "_seconds" not in target["expr"]:
                assert units[target["refId"]][0] in PER_SECOND_UNITS, (panel["title"], target["refId"])


def test_every_errors_series_is_a_rate_in_ops() -> None:
    [errors] = [p for p in _panels() if p["title"] == "Errors by kind"]
    units = _units(errors)
    for target in errors["targets"]:
        assert _per(target["expr"]) == "second", target["expr"]
        assert units[target["refId"]] == ("ops", False), target["refId"]
