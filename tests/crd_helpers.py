"""Strict validation of custom resources against the CRDs that define them (vendored in
tests/deploy/crds/: the Prometheus Operator's, as kube-prometheus-stack installs them).

kubernetes-validate knows only built-in kinds, so the chart's ServiceMonitor, PodMonitor and
PrometheusRule are checked here with jsonschema against the CRD's openAPIV3Schema, made strict the
way `kubectl apply --validate=strict` (server-side field validation) is: an object schema that
lists properties and says nothing of others rejects unknown fields, so a misspelt key
(`scrape_timeout`, `source_labels`) fails instead of being pruned silently.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

CRDS = Path(__file__).resolve().parent / "deploy" / "crds"


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        pattern = out.get("pattern")
        if isinstance(pattern, str) and pattern.startswith("^(?i)"):
            out["pattern"] = "(?i)^" + pattern[5:]  # Go's RE2 takes the flag there; Python only first
        if out.get("x-kubernetes-int-or-string"):
            out.pop("type", None)
            out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@cache
def _schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the strict schema of that version of the CRD."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(CRDS.glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd:
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
                # metadata is the API server's ObjectMeta, not described by the CRD.
                schema["properties"]["metadata"] = {"type": "object"}
                out[(f"{group}/{version['name']}", kind)] = _strict(schema)
    return out


def kinds() -> set[tuple[str, str]]:
    return set(_schemas())


def validate(obj: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError unless ``obj`` is valid for its CRD (KeyError: no CRD)."""
    schema = _schemas()[(obj["apiVersion"], obj["kind"])]
    jsonschema.validate(obj, schema, cls=jsonschema.Draft7Validator)
