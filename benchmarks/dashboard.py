"""A picture of the Grafana dashboard, drawn from a real Prometheus scraping a real sidecar (issue 21).

Not a measurement against a baseline like the other benchmarks: a run of the whole system whose
output is the dashboard's panels as they look, with the dashboard's own queries.

1. generates a small dataset on local disk (``--samples`` ``.npz`` files, a float32 array of
   ``--dim`` values and a learnable label each, as ``examples/demo.py``),
2. starts a real ``epochfs sidecar`` on it (``file://`` remote, a ``--capacity`` smaller than the
   dataset so the cache fills and then evicts, a ``--max-rate`` so its growth is visible),
3. starts a real Prometheus (Debian's ``prometheus``) scraping the sidecar's ``/metrics`` every
   ``--scrape-interval`` with the target labels ``namespace`` and ``pod`` that Kubernetes service
   discovery adds,
4. trains a small torch model for ``--seconds`` with ``EpochLoader`` over the mount (an epoch after
   another, each cut by the loader's lookup), reporting to the sidecar's ``/v1/client-report`` so the
   client-side metrics move too, then lets Prometheus scrape ``--tail`` seconds more,
5. reads every panel of the dashboard (``helm/epochfs/dashboards/epochfs.json``, or ``--dashboard``),
   resolves its template variables as Grafana would (each query variable by its own
   ``label_values(...)`` query against this Prometheus; ``$__rate_interval`` as Grafana computes it:
   the larger of four scrape intervals and the step plus one scrape interval), and sends each
   panel's targets (``expr``) to Prometheus's range API (``/api/v1/query_range``) over the run,
6. draws one PNG with matplotlib (Agg): the panels where the dashboard places them (``gridPos``),
   each titled with the panel's title, one line per series (labelled by the target's
   ``legendFormat``), y axes in the panel's unit; stat and gauge panels as their last value in big
   text. x: seconds since the sidecar started.

A panel without data is a finding: the run prints which, and why (a metric Prometheus never scraped
from the sidecar, a label selector that matches no series, only NaN from a quantile of empty
buckets), and ``--summary FILE`` writes every panel and target with its series and points as JSON.
The sidecar and Prometheus are always stopped (SIGTERM; the sidecar unmounts) and the scratch folder
removed, on errors, SIGTERM and Ctrl-C too. Needs root and /dev/fuse (the mount), the ``prometheus``
program (Debian package) and matplotlib (``pip install 'epochfs[bench]'``).

    epochfs bench dashboard --args --out docs/dashboard.png                       # ~2 minutes
    python -m epochfs.benchmarks.dashboard --samples 600 --seconds 8 --out /tmp/d.png --summary /tmp/d.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np

from epochfs.benchmarks import harness

NAMESPACE, POD = "bench", "trainer-0"
"""The target labels the scrape config gives the sidecar (Kubernetes service discovery's)."""

STAT_TYPES = frozenset({"stat", "gauge", "bargauge"})
"""Panels drawn as their last value in big text."""
SKIPPED_TYPES = frozenset({"row", "text", "news", "dashlist"})
"""Panels without queries to draw."""


# ---------------------------------------------------------------------------------- the dashboard
def default_dashboard() -> Path:
    """The chart's dashboard in this checkout (benchmarks/ sits beside helm/)."""
    return Path(__file__).resolve().parent.parent / "helm" / "epochfs" / "dashboards" / "epochfs.json"


def panels_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel with queries, rows' nested panels included, in the dashboard's reading order."""
    found: list[dict[str, Any]] = []

    def walk(items: list[dict[str, Any]]) -> None:
        for p in items:
            walk(p.get("panels", []))  # a collapsed row holds its panels
            if p.get("type") not in SKIPPED_TYPES and p.get("targets"):
                found.append(p)

    walk(doc.get("panels", []))

    def place(p: dict[str, Any]) -> tuple[int, int]:
        pos = p.get("gridPos", {})
        return int(pos.get("y", 0)), int(pos.get("x", 0))

    return sorted(found, key=place)


def grafana_rate_interval(scrape: float, step: float) -> float:
    """Grafana's ``$__rate_interval``: max(4 x scrape interval, step + scrape interval)."""
    return max(4 * scrape, step + scrape)


def duration(seconds: float) -> str:
    """A PromQL duration: ``4s``, ``1500ms``."""
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def prom_regex_escape(value: str) -> str:
    """A label value as Grafana writes it into a regex matcher of a PromQL string (backslashes doubled)."""
    return re.sub(r"([\\^$*+?.()|\[\]{}])", r"\\\\\1", value)


def substitute(expr: str, variables: dict[str, str]) -> str:
    """``$name``, ``${name}``, ``${name:raw}`` and ``[[name]]`` replaced by their values; the longest
    names first (``$__rate_interval`` before ``$__rate``)."""
    for name in sorted(variables, key=len, reverse=True):
        literal = variables[name].replace("\\", "\\\\")  # a replacement string: backslashes kept
        expr = re.sub(r"\$\{" + re.escape(name) + r"(?::[a-z]+)?\}", literal, expr)
        expr = expr.replace(f"[[{name}]]", variables[name])
        expr = re.sub(r"\$" + re.escape(name) + r"(?![A-Za-z0-9_])", literal, expr)
    return expr


def legend(fmt: str | None, labels: dict[str, str], expr: str) -> str:
    """A series' name as Grafana shows it: ``legendFormat`` with ``{{label}}`` filled in, else its
    labels (``{pod="x"}``), else the expression."""
    if fmt and fmt != "__auto":
        return re.sub(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)
    shown = {k: v for k, v in labels.items() if k != "__name__"}
    if shown:
        pairs = ", ".join(f'{k}="{v}"' for k, v in sorted(shown.items()))
        return labels.get("__name__", "") + "{" + pairs + "}"
    return expr


LABEL_VALUES = re.compile(
    r"^\s*label_values\(\s*(?:(?P<selector>.+?)\s*,\s*)?(?P<label>[A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$")


def variable_query(var: dict[str, Any]) -> str:
    query = var.get("query")
    if isinstance(query, dict):
        query = query.get("query")
    return str(query or var.get("definition") or "")


# ---------------------------------------------------------------------------------- Prometheus
class Prometheus:
    """The HTTP API of a Prometheus server."""

    def __init__(self, base: str) -> None:
        self.base = base

    def get(self, path: str, params: Sequence[tuple[str, str]]) -> Any:
        url = self.base + path + "?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=30) as r:
                doc = json.loads(r.read())
        except urllib.error.HTTPError as e:  # 400/422: a query it refuses; the body says why
            doc = json.loads(e.read() or b"{}")
        if doc.get("status") != "success":
            raise ValueError(f"{doc.get('errorType', 'error')}: {doc.get('error', doc)}")
        return doc["data"]

    def range(self, expr: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        data = self.get("/api/v1/query_range", [("query", expr), ("start", f"{start:.3f}"),
                                                 ("end", f"{end:.3f}"), ("step", duration(step))])
        return list(data["result"])

    def label_values(self, label: str, selector: str | None, start: float, end: float) -> list[str]:
        params = [("start", f"{start:.3f}"), ("end", f"{end:.3f}")]
        if selector:
            params.append(("match[]", selector))
        return sorted(self.get(f"/api/v1/label/{label}/values", params))

    def series(self, selector: str, start: float, end: float) -> list[dict[str, str]]:
        return list(self.get("/api/v1/series", [("match[]", selector), ("start", f"{start:.3f}"),
                                                ("end", f"{end:.3f}")]))

    def has_scraped(self) -> bool:
        """A scrape of the target was attempted (``up`` has a sample, 0 while nothing answers)."""
        try:
            return bool(self.get("/api/v1/query", [("query", "up")])["result"])
        except (ValueError, OSError):
            return False

    def count_scrapes(self, at: float) -> int:
        found = self.get("/api/v1/query", [("query", "count_over_time(up[1h])"), ("time", f"{at:.3f}")])
        return int(float(found["result"][0]["value"][1])) if found["result"] else 0


def resolve_variables(doc: dict[str, Any], prom: Prometheus, start: float, end: float) -> dict[str, str]:
    """Each query variable's value by its own ``label_values(...)`` query against this Prometheus,
    in the dashboard's order (a later one may use an earlier one): the one value found, several as a
    regex alternation (multi-select), none as the variable's "All" value (``allValue``, else ``.*``).
    Other variables (data source, custom, constant) take their current or first value."""
    values: dict[str, str] = {}
    for var in doc.get("templating", {}).get("list", []):
        name, kind = var.get("name"), var.get("type")
        if not name or kind == "datasource":
            continue
        found: list[str] = []
        if kind == "query":
            m = LABEL_VALUES.match(variable_query(var))
            if m:
                selector = substitute(m.group("selector"), values) if m.group("selector") else None
                with contextlib.suppress(ValueError, OSError):
                    found = prom.label_values(m.group("label"), selector, start, end)
        else:  # custom, constant, textbox, interval: what is selected, else the first option
            current = var.get("current", {}).get("value")
            options = [o.get("value") for o in var.get("options", []) if o.get("value")]
            if isinstance(current, list):
                found = [str(v) for v in current if v and v != "$__all"]
            elif current and current != "$__all":
                found = [str(current)]
            if not found and options:
                found = [str(options[0])]
            if not found and kind == "constant" and var.get("query"):
                found = [str(var["query"])]
        if not found:
            values[name] = str(var.get("allValue") or ".*")
        elif len(found) == 1:
            values[name] = prom_regex_escape(found[0])
        else:
            values[name] = "(" + "|".join(prom_regex_escape(v) for v in found) + ")"
    return values


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


# ---------------------------------------------------------------------------------- the picture
BINARY = ("B", "KiB", "MiB", "GiB", "TiB")


def unit_scale(unit: str, values: Sequence[float]) -> tuple[float, str]:
    """A factor for the values and the axis label of a Grafana unit."""
    top = max((abs(v) for v in values if math.isfinite(v)), default=0.0)
    if unit in ("bytes", "decbytes"):
        base = 1024.0 if unit == "bytes" else 1000.0
        names = BINARY if unit == "bytes" else ("B", "kB", "MB", "GB", "TB")
        power = 0
        while top >= base ** (power + 1) and power < len(names) - 1:
            power += 1
        return 1.0 / base**power, names[power]
    if unit == "percentunit":
        return 100.0, "%"
    if unit == "percent":
        return 1.0, "%"
    if unit == "s":
        return (1000.0, "ms") if 0 < top < 1 else (1.0, "s")
    if unit == "ms":
        return 1.0, "ms"
    if unit in ("MBs", "MBps"):
        return 1.0, "MB/s"
    if unit in ("Bps", "binBps"):
        return 1.0 / 2**20, "MiB/s"
    if unit in ("ops", "reqps"):
        return 1.0, "/s"
    return 1.0, ""


def value_text(value: float, unit: str) -> str:
    scale, label = unit_scale(unit, [value])
    if not math.isfinite(value):
        return "no data"
    shown = value * scale
    digits = 0 if abs(shown) >= 100 else 1 if abs(shown) >= 10 else 2
    return f"{shown:.{digits}f}" + (f" {label}" if label not in ("", "%") else label)


def plain(text: str) -> str:
    """Text matplotlib shows as it is (a ``$`` pair would start math)."""
    return text.replace("$", r"\$")


def _no_data(ax: Any, p: Panel) -> None:
    reasons = "\n".join(dict.fromkeys(t.why_empty for t in p.targets if t.why_empty))
    ax.text(0.5, 0.5, plain("No data\n" + reasons), ha="center", va="center", wrap=True, fontsize=8,
            color="#b00", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _stat(ax: Any, p: Panel, series: list[Series], height_pt: float) -> None:
    """Each series' value (the panel's reduction, the last by default) in big text, sized to the
    panel's height (``height_pt`` points); a gauge's bar."""
    ax.axis("off")
    shown = series[:4]
    for i, s in enumerate(shown):
        value = s.reduce(p.calc)
        yy = 0.6 if len(shown) == 1 else 0.85 - i * 0.7 / (len(shown) - 1)
        size = min(32.0, height_pt * (0.25 if len(shown) == 1 else 0.5 / (len(shown) + 1)))
        ax.text(0.5, yy, value_text(value, s.unit or p.unit), ha="center", va="center", fontsize=size,
                fontweight="bold", color="#2a7", transform=ax.transAxes)
        ax.text(0.5, yy - (0.28 if len(shown) == 1 else 0.1), plain(s.name), ha="center", va="center",
                fontsize=8, color="#444", transform=ax.transAxes)
    if p.type == "gauge" and len(shown) == 1 and math.isfinite(shown[0].reduce(p.calc)):
        value = shown[0].reduce(p.calc)
        low = float(p.min) if p.min is not None else 0.0
        high = float(p.max) if p.max is not None else (100.0 if p.unit == "percent" else max(1.0, value))
        filled = min(1.0, max(0.0, (value - low) / (high - low))) if high > low else 0.0
        ax.barh([0.12], [0.8], left=0.1, height=0.06, color="#ddd", transform=ax.transAxes)
        ax.barh([0.12], [0.8 * filled], left=0.1, height=0.06, color="#2a7", transform=ax.transAxes)
    if len(series) > len(shown):
        ax.text(0.98, 0.02, f"+{len(series) - len(shown)} more", ha="right", fontsize=7,
                transform=ax.transAxes)


def _lines(ax: Any, series: list[Series], unit: str, colours: Iterator[str],
           limits: tuple[float | None, float | None] = (None, None)) -> list[Any]:
    """``series`` on ``ax`` in ``unit``; the panel's min and max (raw values) as the axis's limits."""
    scale, label = unit_scale(unit, [v for s in series for v in s.v])
    handles = [ax.plot(s.t, [v * scale for v in s.v], linewidth=1.1, label=plain(s.name),
                       color=next(colours))[0] for s in series]
    low, high = limits
    if low is not None or high is not None:
        ax.set_ylim(bottom=None if low is None else float(low) * scale,
                    top=None if high is None else float(high) * scale)
    ax.tick_params(labelsize=8)
    if label:
        ax.set_ylabel(label, fontsize=8)
    return handles


def _timeseries(ax: Any, p: Panel, series: list[Series], span: float, colours: Iterator[str]) -> None:
    """One line per series; those an override puts on the right axis, or in another unit, on a
    second axis."""
    left = [s for s in series if not s.right and (s.unit or p.unit) == p.unit]
    right = [s for s in series if s not in left]
    handles = _lines(ax, left, p.unit, colours, (p.min, p.max)) if left else []
    if right:
        twin = ax.twinx()
        handles += _lines(twin, right, right[0].unit or p.unit, colours)
    ax.set_xlim(0, span)
    ax.grid(True, linewidth=0.4, alpha=0.6)
    ax.legend(handles=handles, fontsize=7, loc="upper left", ncol=2 if len(series) > 4 else 1,
              framealpha=0.7)


def draw(panels: list[Panel], out: Path, *, title: str, span: float, width: float, dpi: int) -> None:
    """The panels where the dashboard puts them (``gridPos``: 24 columns), into one PNG of at most 256
    colours (a plot loses nothing to the palette, the file two thirds of its size)."""
    try:
        import matplotlib
        from PIL import Image
    except ModuleNotFoundError as e:
        harness.missing_module(e)
    matplotlib.use("Agg")
    import io
    import itertools

    import matplotlib.pyplot as plt
    from matplotlib.gridspec import GridSpec

    height_units = max((p.grid.get("y", 0) + p.grid.get("h", 8) for p in panels), default=8)
    fig = plt.figure(figsize=(width, max(3.0, height_units * width / 24 * 0.45)), dpi=dpi,
                     layout="constrained")
    fig.suptitle(plain(textwrap.fill(title, int(width * 11))), fontsize=11)
    unit_pt = fig.get_figheight() / height_units * 72  # the height of one grid unit, in points
    grid = GridSpec(height_units, 24, figure=fig)
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for p in panels:
        x, y = p.grid.get("x", 0), p.grid.get("y", 0)
        w, h = p.grid.get("w", 12), p.grid.get("h", 8)
        ax = fig.add_subplot(grid[y:y + h, x:x + w])
        ax.set_title(plain(p.title), fontsize=10, loc="left")
        series = p.data_series
        if not series:
            _no_data(ax, p)
        elif p.type in STAT_TYPES:
            _stat(ax, p, series, h * unit_pt)
        else:
            _timeseries(ax, p, series, span, itertools.cycle(palette))
            if y + h >= height_units:
                ax.set_xlabel("seconds since the sidecar started", fontsize=8)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    plt.close(fig)
    buffer.seek(0)
    with Image.open(buffer) as image:
        no_dither = getattr(Image, "Dither", Image).NONE  # Image.NONE before Pillow 9.1
        image.convert("RGB").quantize(colors=256, dither=no_dither).save(out, optimize=True)


# ---------------------------------------------------------------------------------- the run
def generate_dataset(root: Path, count: int, dim: int, *, seed: int = 0) -> int:
    """``count`` samples ``train/NNNNN.npz`` (``x``: random float32, ``y``: a learnable label); bytes."""
    rng = np.random.default_rng(seed)
    direction = rng.standard_normal(dim).astype(np.float32)
    (root / "train").mkdir(parents=True, exist_ok=True)
    total = 0
    for i in range(count):
        x = rng.standard_normal(dim).astype(np.float32)
        path = root / "train" / f"{i:05d}.npz"
        np.savez(path, x=x, y=np.int64(x @ direction > 0))
        total += path.stat().st_size
    return total



@contextlib.contextmanager
def process(cmd: Sequence[str], *, what: str, url: str, log: Path, timeout: float = 60.0,
            unmount: Sequence[Path] = (),
            env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """``cmd`` in a session of its own (Ctrl-C reaches this program only, which then stops it with one
    SIGTERM: a second signal would make the sidecar exit at once), ready when ``url`` answers 200;
    stopped by :func:`harness.stop` after the block, whatever happens in it."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        harness.wait_ready(proc, lambda: harness.answers(url), what=what, timeout=timeout, interval=0.1,
                           log=log)
        yield proc
    finally:
        harness.stop(proc, timeout=30.0, unmount=unmount)


def prometheus_config(path: Path, target: str, scrape: float) -> None:
    interval = duration(scrape)
    path.write_text(
        f"global:\n  scrape_interval: {interval}\n  evaluation_interval: {interval}\n"
        f"scrape_configs:\n  - job_name: epochfs\n    scrape_timeout: {duration(scrape * 0.9)}\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
        f"        labels: {{namespace: {NAMESPACE}, pod: {POD}}}\n")


@dataclass
class Workload:
    epochs: int = 0
    samples: int = 0
    seconds: float = 0.0
    first_loss: float = math.nan
    last_loss: float = math.nan
    epoch_files: list[int] = field(default_factory=list)


def import_torch() -> Any:
    try:
        import torch

        import epochfs.torchclient  # noqa: F401  (torch's DataLoader and the client, imported once)
    except ModuleNotFoundError as e:
        harness.missing_module(e)
    return torch


def train(mount: Path, ns: argparse.Namespace) -> Workload:
    """Epoch after epoch through the mount until ``--seconds`` have passed (the last epoch finishes)."""
    torch = import_torch()
    from epochfs.torchclient import EpochLoader

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(ns.dim, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = EpochLoader(mount, batch_size=ns.batch_size, num_workers=ns.workers, decode="npz", progress=None)
    done = Workload()
    started = time.monotonic()
    try:
        while time.monotonic() - started < ns.seconds:
            losses = []
            for batch in loader.epoch(done.epochs):
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])
                loss.backward()
                optimizer.step()
                losses.append(float(loss.item()))
                if ns.step_ms:
                    time.sleep(ns.step_ms / 1000)  # the rest of a training step (a GPU's share)
            stats = loader.history[-1]
            done.epoch_files.append(stats.files)
            done.samples += stats.samples
            loss_mean = sum(losses) / max(1, len(losses))
            if done.epochs == 0:
                done.first_loss = loss_mean
            done.last_loss = loss_mean
            print(f"  epoch {done.epochs}: {stats.files} samples, {stats.mb_per_s:.1f} MB/s, waited "
                  f"{stats.wait_seconds:.2f} s, loss {loss_mean:.3f}", file=sys.stderr, flush=True)
            done.epochs += 1
    finally:
        loader.close()  # the workers stopped, the reporter's last increments sent
    done.seconds = time.monotonic() - started
    return done


def run(ns: argparse.Namespace, folder: Path) -> tuple[list[Panel], dict[str, Any]]:
    """The sidecar, Prometheus and the workload; the panels queried before anything stops."""
    prometheus_bin = ns.prometheus
    doc = json.loads(ns.dashboard.read_text())
    remote, cache, mount = folder / "remote", folder / "cache", folder / "mnt"
    mount.mkdir()
    print(f"dashboard: generating {ns.samples} samples under {remote}", file=sys.stderr, flush=True)
    dataset_bytes = generate_dataset(remote, ns.samples, ns.dim)
    port, prom_port = harness.free_port(), harness.free_port()
    sidecar_cmd = [*harness.EPOCHFS, "--log-level", "INFO", "sidecar", "--remote", f"file://{remote}",
                   "--cache", str(cache), "--mount", str(mount), "--health-port", str(port),
                   "--capacity", ns.capacity, "--max-rate", ns.max_rate, "--min-samples", "64",
                   "--concurrency", "8", "--in-use-seconds", "0", *ns.sidecar_arg]
    config = folder / "prometheus.yml"
    prometheus_config(config, f"127.0.0.1:{port}", ns.scrape_interval)
    prom_cmd = [prometheus_bin, f"--config.file={config}", f"--storage.tsdb.path={folder / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"]
    prom = Prometheus(f"http://127.0.0.1:{prom_port}")
    # The client's reports reach this sidecar (the loader reads the URL when it is made).
    os.environ["EPOCHFS_REPORT_URL"] = f"http://127.0.0.1:{port}/v1/client-report"
    import_torch()  # its first import takes seconds: before the sidecar starts sampling
    prom_log = folder / "prometheus.log"
    with process(prom_cmd, what="prometheus", url=prom.base + "/-/ready", log=prom_log) as prom_proc:
        # Its first scrape (of nothing yet) a few seconds after it is ready (service discovery's
        # first update): the sidecar starts after it, so the pictures begin with an empty cache.
        harness.wait_ready(prom_proc, prom.has_scraped, what="prometheus's first scrape", timeout=60,
                           interval=0.2, log=prom_log)
        origin = time.time()
        with process(sidecar_cmd, what="epochfs sidecar", url=f"http://127.0.0.1:{port}/readyz",
                     log=folder / "sidecar.log", unmount=[mount]):
            panels, meta = observe(ns, doc, prom, mount, origin)
    meta.update({"samples": ns.samples, "dataset_bytes": dataset_bytes, "capacity": ns.capacity,
                 "max_rate": ns.max_rate})
    return panels, meta


def observe(ns: argparse.Namespace, doc: dict[str, Any], prom: Prometheus, mount: Path,
            origin: float) -> tuple[list[Panel], dict[str, Any]]:
    """The workload on the running sidecar, then every panel queried over the run."""
    # Epoch 0 cut now, small (the sampler has just begun), so the growth shows.
    (mount / "epoch-0").is_dir()
    print(f"dashboard: sidecar and prometheus up; training for {ns.seconds:g} s", file=sys.stderr, flush=True)
    workload = train(mount, ns)
    time.sleep(ns.tail)
    end = time.time()
    # The last scrape in the database before anything stops (a scrape is at most one interval away).
    time.sleep(ns.scrape_interval)
    step = ns.step or ns.scrape_interval
    span = end - origin
    builtins = {"__rate_interval": duration(grafana_rate_interval(ns.scrape_interval, step)),
                "__interval": duration(step), "__interval_ms": str(round(step * 1000)),
                "__range": duration(span), "__range_s": str(round(span)),
                "__range_ms": str(round(span * 1000))}
    variables = {**resolve_variables(doc, prom, origin, end), **builtins}
    panels = query_panels(doc, prom, start=origin, end=end, step=step, origin=origin, variables=variables)
    meta = {"dashboard": str(ns.dashboard), "span_s": round(span, 1), "step": duration(step),
            "scrape_interval": duration(ns.scrape_interval), "scrapes": prom.count_scrapes(end),
            "variables": variables, "workload": asdict(workload)}
    return panels, meta


def report(panels: list[Panel]) -> list[str]:
    lines = []
    width = max((len(p.title) for p in panels), default=5)
    for p in panels:
        count = len(p.data_series)
        lines.append(f"  {p.title:<{width}}  {count:3d} series" + ("" if p.has_data else "  NO DATA"))
        for t in p.targets:
            if not t.has_data:
                lines.append(f"      no data: {t.query}\n        why: {t.why_empty}")
    return lines


def _terminate(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: a second one does not cut the clean-up short
    raise KeyboardInterrupt  # clean up as for Ctrl-C: the sidecar and Prometheus stopped, scratch removed


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m epochfs.benchmarks.dashboard", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("dashboard.png"), help="the PNG (dashboard.png)")
    p.add_argument("--summary", type=Path, help="write every panel, target and series (counts) here as JSON")
    p.add_argument("--dashboard", type=Path, default=default_dashboard(),
                   help="the Grafana dashboard JSON (default: the chart's, "
                   "helm/epochfs/dashboards/epochfs.json)")
    p.add_argument("--samples", type=int, default=8000, help="samples in the generated dataset (8000)")
    p.add_argument("--dim", type=int, default=1024, help="float32 values per sample (1024: ~4.3 KB files)")
    p.add_argument("--capacity", default="12Mi", help="the sidecar's --capacity (12Mi, about a third of "
                   "the default dataset: it fills, then evicts)")
    p.add_argument("--max-rate", default="512Ki", help="the sidecar's --max-rate (512Ki: the cache fills "
                   "in about 25 s)")
    p.add_argument("--seconds", type=float, default=90.0, help="seconds of training (90)")
    p.add_argument("--tail", type=float, default=5.0, help="seconds scraped after training (5)")
    p.add_argument("--scrape-interval", type=float, default=1.0, help="Prometheus's, in seconds (1)")
    p.add_argument("--step", type=float, help="query_range step in seconds (default: the scrape interval)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=2, help="EpochLoader's worker processes (2)")
    p.add_argument("--step-ms", type=float, default=20.0,
                   help="milliseconds each training step sleeps besides the model (20; a GPU's share)")
    p.add_argument("--sidecar-arg", action="append", default=[], metavar="FLAG",
                   help="one more flag for the sidecar, e.g. --sidecar-arg=--cut-interval=5 (repeatable)")
    p.add_argument("--width", type=float, default=16.0, help="figure width in inches (16)")
    p.add_argument("--dpi", type=int, default=80, help="dots per inch (80)")
    p.add_argument("--dir", type=Path, help="scratch folder (emptied; default: a temp folder)")
    ns = p.parse_args(argv)
    if ns.samples < 64 or ns.seconds <= 0 or ns.scrape_interval <= 0:
        p.error("--samples must be at least 64 (the sidecar's --min-samples), --seconds and "
                "--scrape-interval positive")
    if not ns.dashboard.is_file():
        p.error(f"no dashboard at {ns.dashboard}")
    harness.require("matplotlib", "torch", "mfusepy")
    if not Path("/dev/fuse").exists() or os.geteuid() != 0:
        harness.fail("needs root and /dev/fuse (the sidecar mounts its FUSE view)")
    ns.prometheus = harness.program("prometheus")
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also where it was started ignoring SIGINT
    try:
        with harness.work_dir(ns.dir, prefix="epochfs-dashboard-") as folder:
            panels, meta = run(ns, folder)
    except KeyboardInterrupt:
        print("dashboard: interrupted; the sidecar and prometheus stopped, scratch removed", file=sys.stderr)
        return 130
    w = meta["workload"]
    mib = meta["dataset_bytes"] / 2**20
    title = (f"epochfs dashboard: a real sidecar ({ns.samples} samples, {mib:.0f} MiB "
             f"file:// remote, --capacity {ns.capacity}, --max-rate {ns.max_rate}) under EpochLoader "
             f"({w['epochs']} epochs), scraped by Prometheus every {meta['scrape_interval']}; "
             f"$__rate_interval = {meta['variables']['__rate_interval']}")
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    draw(panels, ns.out, title=title, span=meta["span_s"], width=ns.width, dpi=ns.dpi)
    empty = [p.title for p in panels if not p.has_data]
    print(f"dashboard: {len(panels)} panels over {meta['span_s']:.0f} s ({meta['scrapes']} scrapes), "
          f"{w['epochs']} epochs trained, {w['samples']} samples delivered")
    print("\n".join(report(panels)))
    print(f"panels without data: {', '.join(empty) if empty else 'none'}")
    print(f"wrote {ns.out} ({ns.out.stat().st_size / 1000:.0f} kB)")
    if ns.summary:
        ns.summary.parent.mkdir(parents=True, exist_ok=True)
        ns.summary.write_text(json.dumps({**meta, "out": str(ns.out), "panels_without_data": empty,
                                          "panels": [p.summary() for p in panels]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
