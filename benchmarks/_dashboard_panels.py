"""The dashboard's picture, its results: every panel's targets queried over the run into series,
with the overrides Grafana would apply, and for a target without data the reason, as far as
Prometheus can tell (a metric never scraped, a selector that matches nothing, only NaN).

Apart from :mod:`.dashboard` (the run) and :mod:`._dashboard_draw` (the PNG): the findings a run
prints and writes as JSON (``--summary``) come from here, whether or not anything is drawn.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from epochfs.benchmarks._dashboard_queries import Prometheus, duration, legend, panels_of, substitute

SELECTOR = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})")
"""``name{matchers}`` in an expression (the dashboard's selectors all have matchers)."""
METRIC = re.compile(r"\bepochfs_[a-zA-Z0-9_:]+")


def why_empty(expr: str, prom: Prometheus, known: set[str], start: float, end: float) -> str:
    """Why an expression returned nothing over the run, as far as Prometheus can tell."""
    names = sorted(set(METRIC.findall(expr)))
    never = [n for n in names if n not in known]
    if never:
        return (f"{', '.join(never)}: never scraped (the sidecar does not export "
                f"{'it' if len(never) == 1 else 'them'}, or not under this name)")
    for name, matchers in SELECTOR.findall(expr):
        if not name.startswith("epochfs_"):
            continue
        try:
            if not prom.series(name + matchers, start, end):
                return f"{name}{matchers}: the metric is scraped, but no series matches these labels"
        except ValueError as e:
            return f"{name}{matchers}: refused: {e}"
    return ("the series exist but the expression yields nothing over the run (a rate over fewer than "
            "two samples in its window, or a filter that drops every value)")


# ---------------------------------------------------------------------------------- results
@dataclass
class Series:
    name: str
    labels: dict[str, str]
    t: list[float]
    """Seconds since the sidecar started."""
    v: list[float]
    ref_id: str = ""
    right: bool = False
    """On the right axis (an override's ``custom.axisPlacement``)."""
    unit: str | None = None
    """An override's unit, else the panel's."""

    @property
    def finite(self) -> int:
        return sum(1 for x in self.v if math.isfinite(x))

    def last(self) -> float:
        return next((x for x in reversed(self.v) if math.isfinite(x)), math.nan)

    def reduce(self, calc: str) -> float:
        """A stat panel's reduction (``reduceOptions.calcs``; the last value for those not known here)."""
        values = [x for x in self.v if math.isfinite(x)]
        if not values:
            return math.nan
        return {"mean": sum(values) / len(values), "max": max(values), "min": min(values),
                "sum": sum(values), "first": values[0], "firstNotNull": values[0]}.get(calc, values[-1])


@dataclass
class Target:
    expr: str
    query: str
    legend: str | None
    series: list[Series] = field(default_factory=list)
    error: str | None = None
    why_empty: str | None = None

    @property
    def has_data(self) -> bool:
        return any(s.finite for s in self.series)


@dataclass
class Panel:
    title: str
    type: str
    unit: str
    grid: dict[str, int]
    targets: list[Target]
    min: float | None = None
    max: float | None = None
    calc: str = "lastNotNull"

    @property
    def has_data(self) -> bool:
        return any(t.has_data for t in self.targets)

    @property
    def data_series(self) -> list[Series]:
        """Its series with at least one finite value."""
        return [s for t in self.targets for s in t.series if s.finite]

    def summary(self) -> dict[str, Any]:
        return {"title": self.title, "type": self.type, "unit": self.unit,
                "series": sum(len(t.series) for t in self.targets),
                "series_with_data": len(self.data_series),
                "has_data": self.has_data,
                "targets": [{"expr": t.expr, "query": t.query, "legend": t.legend,
                             "series": [{"name": s.name, "points": len(s.v), "finite": s.finite,
                                         "last": s.last() if s.finite else None,
                                         "max": max((v for v in s.v if math.isfinite(v)), default=None)}
                                        for s in t.series],
                             "error": t.error, "why_empty": t.why_empty} for t in self.targets]}


def query_panels(doc: dict[str, Any], prom: Prometheus, *, start: float, end: float, step: float,
                 origin: float, variables: dict[str, str]) -> list[Panel]:
    """Every panel's targets over [start, end] from Prometheus; why for those without data."""
    known = set(prom.label_values("__name__", None, start, end))
    panels = []
    for p in panels_of(doc):
        defaults = p.get("fieldConfig", {}).get("defaults", {})
        overrides = p.get("fieldConfig", {}).get("overrides", [])
        targets = []
        for raw in p["targets"]:
            if raw.get("hide") or not raw.get("expr"):
                continue
            expr = str(raw["expr"])
            t = Target(expr=expr, query=substitute(expr, variables), legend=raw.get("legendFormat"))
            try:
                for r in prom.range(t.query, start, end, step):
                    labels = dict(r.get("metric", {}))
                    t.series.append(Series(legend(t.legend, labels, t.query), labels,
                                           [float(ts) - origin for ts, _ in r["values"]],
                                           [float(v) for _, v in r["values"]]))
            except (ValueError, OSError) as e:
                t.error = str(e)
            if t.error:
                t.why_empty = f"Prometheus refused the query: {t.error}"
            elif not t.series:
                t.why_empty = why_empty(t.query, prom, known, start, end)
            elif not t.has_data:
                t.why_empty = why_nan(t.query, prom, start, end)
            for series in t.series:
                apply_overrides(series, overrides, str(raw.get("refId", "")))
            targets.append(t)
        calcs = p.get("options", {}).get("reduceOptions", {}).get("calcs") or ["lastNotNull"]
        panels.append(Panel(title=str(p.get("title", "")), type=str(p.get("type", "timeseries")),
                            unit=str(defaults.get("unit", "")), grid=dict(p.get("gridPos", {})),
                            targets=targets, min=defaults.get("min"), max=defaults.get("max"),
                            calc=str(calcs[0])))
    return panels


def apply_overrides(series: Series, overrides: list[dict[str, Any]], ref_id: str) -> None:
    """The overrides Grafana would apply to ``series`` (matched by name, regex or query): a unit and
    the right axis; others are not drawn here."""
    series.ref_id = ref_id
    for o in overrides:
        matcher = o.get("matcher", {})
        kind, option = matcher.get("id"), str(matcher.get("options", ""))
        hit = ((kind == "byName" and option == series.name)
               or (kind == "byRegexp" and re.fullmatch(option, series.name) is not None)
               or (kind == "byFrameRefID" and option == ref_id))
        if not hit:
            continue
        for prop in o.get("properties", []):
            if prop.get("id") == "unit":
                series.unit = str(prop.get("value"))
            elif prop.get("id") == "custom.axisPlacement":
                series.right = prop.get("value") == "right"


BUCKET = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)_bucket\s*(\{[^}]*\})?")


def why_nan(expr: str, prom: Prometheus, start: float, end: float) -> str:
    """Why an expression's series hold only NaN: for a quantile, whether its histogram ever counted
    an observation during the run."""
    found = BUCKET.search(expr)
    if "histogram_quantile" not in expr or found is None:
        return "only NaN values"
    name, matchers = found.group(1), found.group(2) or ""
    window = duration(max(1.0, end - start))
    counted = f"sum(max_over_time({name}_count{matchers}[{window}]))"
    try:
        got = prom.get("/api/v1/query", [("query", counted), ("time", f"{end:.3f}")])["result"]
    except (ValueError, OSError) as e:
        return f"only NaN (and {counted} was refused: {e})"
    total = float(got[0]["value"][1]) if got else 0.0
    if total == 0:
        return (f"only NaN: {name}_count stayed 0 over the whole run: the sidecar exports the histogram "
                "but never observed a value in it")
    return (f"only NaN: {name} counted {total:.0f} observations, none inside any "
            "$__rate_interval window of the run")
