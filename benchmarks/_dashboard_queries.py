"""The dashboard's picture, its queries: the Grafana dashboard read as Grafana reads it (its panels
in reading order, ``$__rate_interval``, template variables resolved by their own
``label_values(...)`` queries, ``legendFormat``) and the HTTP API of the Prometheus it queries.

Apart from :mod:`.dashboard` (the run: a sidecar, Prometheus, a training loop) because these rules
are Grafana's, checked on their own without a run (tests/sidecar/test_bench_dashboard.py).
"""

from __future__ import annotations

import contextlib
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

SKIPPED_TYPES = frozenset({"row", "text", "news", "dashlist"})
"""Panels without queries to draw."""


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
