"""Who reaches the metrics port through the chart's NetworkPolicy, when `helm test` has pods to ask,
and the dashboard's waiting share per rank (evaluated by promtool, as the alert is)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_helpers import CHART, NAMESPACE, RELEASE, helm, one, render, with_remote

DASHBOARD = CHART / "dashboards" / "epochfs.json"
RULES = CHART / "alerts" / "epochfs.rules.yaml"
PROMETHEUS_PEER = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}


def metrics_rules(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    policy = one(objs, "NetworkPolicy")
    port = {"port": 8080, "protocol": "TCP"}
    return [r for r in policy["spec"]["ingress"] if port in r.get("ports", [])]


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector["matchLabels"].items())


def test_a_podmonitor_alone_is_let_through(helm_bin: Path, tmp_path: Path) -> None:
    """values.yaml: the PodMonitor works with metrics.enabled=false; the policy must open the port."""
    values = {"metrics": {"enabled": False, "podMonitor": {"enabled": True}}}
    objs = render(helm_bin, with_remote(values), tmp_path)
    assert one(objs, "PodMonitor")
    assert len(metrics_rules(objs)) == 1
    objs = render(helm_bin, with_remote({"metrics": {"enabled": False}}), tmp_path)
    assert metrics_rules(objs) == []


def test_helm_tests_pod_reaches_readyz_through_metrics_from(helm_bin: Path, tmp_path: Path) -> None:
    """With networkPolicy.metricsFrom (Prometheus' namespace), the `helm test` pod, in the release's
    namespace, is a peer of the metrics rule too: it asks every sidecar's /readyz on that port."""
    values = {"networkPolicy": {"metricsFrom": [PROMETHEUS_PEER]}}
    objs = render(helm_bin, with_remote(values), tmp_path)
    [rule] = metrics_rules(objs)
    test_pod = next(o for o in objs if o["kind"] == "Pod"
                    and o["metadata"].get("annotations", {}).get("helm.sh/hook") == "test")
    peers = rule["from"]
    assert PROMETHEUS_PEER in peers
    pod_peers = [p for p in peers if set(p) == {"podSelector"}]  # the release's namespace
    assert any(matches(p["podSelector"], test_pod["metadata"]["labels"]) for p in pod_peers), peers
    # Only the test pod: not the release's other pods (the webhook's share name and instance).
    webhook_labels = {**test_pod["metadata"]["labels"], "app.kubernetes.io/component": "webhook"}
    assert not any(matches(p["podSelector"], webhook_labels) for p in pod_peers)
    # Without the test pod, no peer for it.
    objs = render(helm_bin, with_remote({**values, "tests": {"enabled": False}}), tmp_path)
    assert metrics_rules(objs)[0]["from"] == [PROMETHEUS_PEER]


def notes(helm_bin: Path, tmp_path: Path, values: dict[str, Any]) -> str:
    proc = helm(helm_bin, "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client",
                values=with_remote(values), tmp=tmp_path)
    return proc.stdout.split("NOTES:", 1)[1]


def test_no_readyz_test_for_a_webhook_install(helm_bin: Path, tmp_path: Path) -> None:
    """job.enabled=false with the webhook: the webhook injects pods in other namespaces, never
    behind the release's headless Service, so a test asking that Service's pods always fails."""
    values = {"job": {"enabled": False}, "webhook": {"enabled": True}}
    objs = render(helm_bin, with_remote(values), tmp_path)
    assert not [o for o in objs if o["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    assert "helm test" not in notes(helm_bin, tmp_path, values)
    # The chart's Job, and a parent's workload attached with the named templates, keep the test.
    for kept in ({}, {"job": {"enabled": False}}, {"webhook": {"enabled": True}}):
        objs = render(helm_bin, with_remote(kept), tmp_path)
        assert [o for o in objs if o["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"], kept
        assert "helm test" in notes(helm_bin, tmp_path, kept), kept
    # No test pod without the metrics port it asks: NOTES do not offer it either.
    assert "helm test" not in notes(helm_bin, tmp_path, {"metrics": {"enabled": False}})


# --------------------------------------------------------------------------- the dashboard's waiting share


def waiting_panel() -> dict[str, Any]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    [panel] = [p for p in panels if p.get("title") == "Share of time trainers waited for data"]
    return panel


def as_promql(expr: str) -> str:
    """The panel's query with Grafana's variables as Prometheus would get them for every pod."""
    return (expr.replace('"$namespace"', '".*"').replace('"$pod"', '".*"')
            .replace("$__rate_interval", "5m"))


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (Debian: prometheus)")
def test_the_waiting_share_is_per_rank(tmp_path: Path) -> None:
    """An 8-GPU pod whose 8 ranks each wait 20% of the time reports 1.6 s of waiting per second
    to its sidecar: the panel shows 20%, as the alert computes it (the pod's wait over the
    accelerators it requests, from kube-state-metrics; 1 rank for a pod without any)."""
    [target] = waiting_panel()["targets"]
    rule_file = {"groups": [{"name": "dashboard", "rules": [
        {"record": "dashboard_wait_share", "expr": as_promql(target["expr"])}]}]}
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_file))

    def requests(pod: str, resource: str, n: int, container: str = "trainer") -> dict[str, str]:
        return {"series": f'kube_pod_container_resource_requests{{namespace="t", pod="{pod}", '
                          f'container="{container}", resource="{resource}", unit="integer"}}',
                "values": f"{n}+0x20"}

    test = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            {"series": 'epochfs_client_wait_seconds_total{namespace="t", pod="gpus8", job="epochfs"}',
             "values": "0+96x20"},
            requests("gpus8", "nvidia_com_gpu", 8),
            requests("gpus8", "cpu", 16),
            {"series": 'epochfs_client_wait_seconds_total{namespace="t", pod="cpu", job="epochfs"}',
             "values": "0+15x20"},
            requests("cpu", "cpu", 4),
            {"series": 'epochfs_client_wait_seconds_total{namespace="t", pod="tpu", job="epochfs"}',
             "values": "0+120x20"},
            requests("tpu", "google_com_tpu", 2, "worker"),
            requests("tpu", "google_com_tpu", 2, "trainer"),
        ],
        "promql_expr_test": [{"expr": "dashboard_wait_share", "eval_time": "15m", "exp_samples": [
            {"labels": 'dashboard_wait_share{namespace="t", pod="gpus8"}', "value": 0.2},
            {"labels": 'dashboard_wait_share{namespace="t", pod="cpu"}', "value": 0.25},
            {"labels": 'dashboard_wait_share{namespace="t", pod="tpu"}', "value": 0.5},
        ]}],
    }]}
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    proc = subprocess.run(["promtool", "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_panel_counts_ranks_as_the_alert_does() -> None:
    """One list of accelerators in both: a resource added to the alert and not to the panel would
    show that pod's share summed over its ranks again."""
    [target] = waiting_panel()["targets"]
    alert = next(r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
                 if r.get("alert") == "EpochfsTrainersWaitingForData")
    [resources] = set(re.findall(r'resource=~"([^"]+)"', alert["expr"]))
    assert re.findall(r'resource=~"([^"]+)"', target["expr"]) == [resources, resources]
    assert waiting_panel()["fieldConfig"]["defaults"]["max"] == 1
