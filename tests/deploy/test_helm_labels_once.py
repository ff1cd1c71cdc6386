"""Every labels block the chart renders is ONE map with each key once, whatever commonLabels hold.

A key twice in one YAML mapping is refused by strict readers (kustomize, kubectl's) and silently
resolved by last-wins readers (Helm's own): with commonLabels naming one of the chart's
app.kubernetes.io/* keys, the webhook Deployment's pod template got labels its selector no longer
matched (the API server refuses such a Deployment), and commonLabels.release beside a monitor's
labels.release rendered `release` twice. Rendered by the real helm binary, read with a YAML loader
that refuses duplicate keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_helpers import render_text, with_remote


class StrictLoader(yaml.SafeLoader):
    """A SafeLoader that refuses a mapping with one key twice (PyYAML keeps the last silently)."""


def _strict_mapping(loader: StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _strict_mapping)

# Labels that collide with the chart's own keys and with every object's own extra labels.
CLASHING: dict[str, Any] = {
    "commonLabels": {"app.kubernetes.io/name": "trainer", "app.kubernetes.io/instance": "other",
                     "app.kubernetes.io/component": "mine", "release": "prometheus",
                     "grafana_dashboard": "1", "team": "vision"},
    "webhook": {"enabled": True},
    "job": {"labels": {"release": "prometheus", "app.kubernetes.io/name": "job-label"}},
    "dashboard": {"enabled": True},
}
MONITORS = {
    "serviceMonitor": {"metrics": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
        "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}}}},
    "podMonitor": {"metrics": {"podMonitor": {"enabled": True, "labels": {"release": "prometheus"}}}},
}


def strict_render(helm_bin: Path, values: dict[str, Any], tmp: Path) -> list[dict[str, Any]]:
    text = render_text(helm_bin, with_remote(values), tmp)
    return [d for d in yaml.load_all(text, Loader=StrictLoader) if d]


@pytest.mark.parametrize("monitor", sorted(MONITORS))
def test_no_label_key_twice_and_the_chart_labels_win(helm_bin: Path, tmp_path: Path, monitor: str) -> None:
    objs = strict_render(helm_bin, {**CLASHING, **MONITORS[monitor]}, tmp_path)
    kinds = {o["kind"] for o in objs}
    assert {"Job", "Deployment", "Service", "ServiceAccount", "ConfigMap", "Pod"} <= kinds, kinds
    assert ("ServiceMonitor" if monitor == "serviceMonitor" else "PodMonitor") in kinds
    for o in objs:
        labels = o["metadata"].get("labels", {})
        if "helm.sh/chart" not in labels:
            continue
        where = f"{o['kind']} {o['metadata']['name']}"
        # The chart's own labels are never replaced by commonLabels or an object's extra labels.
        assert labels["app.kubernetes.io/name"] == "epochfs", where
        assert labels["app.kubernetes.io/instance"] == "mnist", where
        assert labels.get("app.kubernetes.io/component") != "mine", where
        assert labels["team"] == "vision" and labels["release"] == "prometheus", where
    job = next(o for o in objs if o["kind"] == "Job")
    assert job["metadata"]["labels"]["app.kubernetes.io/component"] == "training"
    assert job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "training"
    sa = next(o for o in objs if o["kind"] == "ServiceAccount")
    assert "app.kubernetes.io/component" not in sa["metadata"]["labels"]
    deployment = next(o for o in objs if o["kind"] == "Deployment")
    selector = deployment["spec"]["selector"]["matchLabels"]
    template = deployment["spec"]["template"]["metadata"]["labels"]
    assert {k: template.get(k) for k in selector} == selector, (selector, template)
    assert template["team"] == "vision"
