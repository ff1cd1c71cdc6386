"""The chart's monitors as kube-prometheus-stack expects them: ServiceMonitor and PodMonitor with
labels, namespace, interval, scrapeTimeout, relabelings and metricRelabelings, rendered by the
real helm, refused by values.schema.json when malformed, and validated strictly against the
Prometheus Operator's own CRD schemas (tests/deploy/crds/)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import crd_helpers
import jsonschema
import pytest
from helm_helpers import (
    CHART,
    NAMESPACE,
    RELEASE,
    container,
    helm,
    one,
    pod_spec,
    render,
    with_remote,
)

RELABELINGS = [{"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node",
                "action": "replace"}]
METRIC_RELABELINGS = [{"sourceLabels": ["__name__"], "regex": "python_info", "action": "drop"}]


def monitor_values(kind: str, **extra: Any) -> dict[str, Any]:
    return {"enabled": True, "labels": {"release": "prometheus"}, "namespace": "monitoring",
            "interval": "15s", "scrapeTimeout": "10s", "relabelings": RELABELINGS,
            "metricRelabelings": METRIC_RELABELINGS, **extra}


@pytest.fixture(scope="module")
def full(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Each monitor with every option set, and the rule: what a kube-prometheus-stack user renders."""
    tmp = tmp_path_factory.mktemp("monitors")
    return {
        "ServiceMonitor": render(helm_bin, with_remote({"metrics": {
            "serviceMonitor": monitor_values("sm"), "prometheusRule": {"enabled": True}}}), tmp),
        "PodMonitor": render(helm_bin, with_remote({"metrics": {
            "podMonitor": monitor_values("pm"), "prometheusRule": {"enabled": True}}}), tmp),
    }


def endpoint_of(obj: dict[str, Any]) -> dict[str, Any]:
    key = "endpoints" if obj["kind"] == "ServiceMonitor" else "podMetricsEndpoints"
    [endpoint] = obj["spec"][key]
    return dict(endpoint)


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PodMonitor"])
def test_monitor_carries_every_option(full: dict[str, list[dict[str, Any]]], kind: str) -> None:
    objs = full[kind]
    monitor = one(objs, kind)
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["namespace"] == "monitoring"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    # In another namespace, it still selects the release's pods.
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert endpoint_of(monitor) == {
        "port": "metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s",
        "relabelings": RELABELINGS, "metricRelabelings": METRIC_RELABELINGS,
    }
    other = "PodMonitor" if kind == "ServiceMonitor" else "ServiceMonitor"
    assert not [o for o in objs if o["kind"] == other]
    crd_helpers.validate(monitor)
    crd_helpers.validate(one(objs, "PrometheusRule"))


def test_pod_monitor_selects_the_pods_and_their_metrics_port(full: dict[str, list[dict[str, Any]]]) -> None:
    objs = full["PodMonitor"]
    pm = one(objs, "PodMonitor")
    template = one(objs, "Job")["spec"]["template"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    ports = {p["name"] for p in container(pod_spec(objs), "epochfs")["ports"]}
    assert endpoint_of(pm)["port"] in ports


def test_service_monitor_selects_the_metrics_service(full: dict[str, list[dict[str, Any]]]) -> None:
    objs = full["ServiceMonitor"]
    sm, svc = one(objs, "ServiceMonitor"), one(objs, "Service")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert endpoint_of(sm)["port"] in {p["name"] for p in svc["spec"]["ports"]}


def test_defaults_leave_optional_fields_out(helm_bin: Path, tmp_path: Path) -> None:
    """Empty options render nothing (Prometheus' defaults apply), and the object goes to the
    release's namespace."""
    for kind, key in (("ServiceMonitor", "serviceMonitor"), ("PodMonitor", "podMonitor")):
        objs = render(helm_bin, with_remote({"metrics": {key: {"enabled": True}}}), tmp_path)
        monitor = one(objs, kind)
        assert monitor["metadata"]["namespace"] == NAMESPACE
        assert endpoint_of(monitor) == {"port": "metrics", "path": "/metrics", "interval": "30s"}
        crd_helpers.validate(monitor)
    no_interval = with_remote({"metrics": {"podMonitor": {"enabled": True, "interval": ""}}})
    objs = render(helm_bin, no_interval, tmp_path)
    assert endpoint_of(one(objs, "PodMonitor")) == {"port": "metrics", "path": "/metrics"}


def test_no_monitor_unless_enabled(helm_bin: Path, tmp_path: Path) -> None:
    kinds = {o["kind"] for o in render(helm_bin, with_remote({}), tmp_path)}
    assert not kinds & {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    # A PodMonitor needs no Service: it renders with metrics.enabled=false; a ServiceMonitor does not.
    objs = render(helm_bin, with_remote({"metrics": {"enabled": False, "podMonitor": {"enabled": True},
                                                     "serviceMonitor": {"enabled": False}}}), tmp_path)
    assert one(objs, "PodMonitor") and not [o for o in objs if o["kind"] == "Service"]


def test_both_monitors_at_once_are_refused(helm_bin: Path, tmp_path: Path) -> None:
    values = with_remote({"metrics": {"serviceMonitor": {"enabled": True}, "podMonitor": {"enabled": True}}})
    proc = helm(helm_bin, "template", RELEASE, str(CHART), values=values, tmp=tmp_path, check=False)
    assert proc.returncode != 0 and "choose one" in proc.stderr


@pytest.mark.parametrize(
    ("monitor", "message"),
    [
        ({"relabelings": [{"source_labels": ["__name__"], "action": "drop"}]}, "source_labels"),
        ({"relabelings": [{"sourceLabels": ["__name__"], "action": "delete"}]}, "relabelings/0/action"),
        ({"metricRelabelings": [{"sourceLabels": ["bad label"], "action": "drop"}]}, "bad label"),
        ({"scrapeTimeout": "10 seconds"}, "scrapeTimeout"),
        ({"interval": 30}, "interval"),
        ({"namespace": "Monitoring"}, "namespace"),
        ({"labels": {"release": 1}}, "release"),
        ({"honorLabels": True}, "honorLabels"),
    ],
)
@pytest.mark.parametrize("key", ["serviceMonitor", "podMonitor"])
def test_schema_refuses_malformed_monitor_options(helm_bin: Path, tmp_path: Path, key: str,
                                                   monitor: dict[str, Any], message: str) -> None:
    values = with_remote({"metrics": {key: {"enabled": True, **monitor}}})
    proc = helm(helm_bin, "template", RELEASE, str(CHART), values=values, tmp=tmp_path, check=False)
    assert proc.returncode != 0
    assert "schema" in proc.stderr.lower() and message in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ({"ruleLabels": {"bad-label": "x"}}, "bad-label"),
        ({"disabled": "EpochfsDiskFull"}, "disabled"),
        ({"runbookUrl": "docs/metrics.md"}, "runbookUrl"),
        ({"runbookUrl": "https://wiki.example/epochfs#alerts"}, "runbookUrl"),
    ],
)
def test_schema_refuses_malformed_rule_options(helm_bin: Path, tmp_path: Path, rule: dict[str, Any],
                                               message: str) -> None:
    values = with_remote({"metrics": {"prometheusRule": {"enabled": True, **rule}}})
    proc = helm(helm_bin, "template", RELEASE, str(CHART), values=values, tmp=tmp_path, check=False)
    assert proc.returncode != 0
    assert "schema" in proc.stderr.lower() and message in proc.stderr, proc.stderr


@pytest.mark.parametrize("kind", ["ServiceMonitor", "PodMonitor"])
def test_strict_crd_validation_catches_a_misspelt_field(full: dict[str, list[dict[str, Any]]],
                                                        kind: str) -> None:
    """The CRD check above can fail: a field the Operator does not know, or a wrong type, is refused."""
    monitor = copy.deepcopy(one(full[kind], kind))
    endpoint = endpoint_of(monitor)
    endpoint["scrape_timeout"] = "10s"
    key = "endpoints" if kind == "ServiceMonitor" else "podMetricsEndpoints"
    monitor["spec"][key] = [endpoint]
    with pytest.raises(jsonschema.ValidationError, match="scrape_timeout"):
        crd_helpers.validate(monitor)
    monitor["spec"][key] = [{**endpoint_of(one(full[kind], kind)), "relabelings": [{"action": "delete"}]}]
    with pytest.raises(jsonschema.ValidationError):
        crd_helpers.validate(monitor)


def test_helm_lint_passes_with_a_pod_monitor(helm_bin: Path, tmp_path: Path) -> None:
    values = with_remote({"metrics": {"podMonitor": monitor_values("pm"),
                                      "prometheusRule": {"enabled": True}}})
    proc = helm(helm_bin, "lint", "--strict", str(CHART), values=values, tmp=tmp_path)
    assert "0 chart(s) failed" in proc.stdout


def test_notes_name_the_monitor_and_the_rule(helm_bin: Path, tmp_path: Path) -> None:
    def notes(values: dict[str, Any]) -> str:
        proc = helm(helm_bin, "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client",
                    values=with_remote(values), tmp=tmp_path)
        return proc.stdout.split("NOTES:", 1)[1]

    on = notes({"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
                            "prometheusRule": {"enabled": True, "namespace": "monitoring"}}})
    assert f"ServiceMonitor {NAMESPACE}/{RELEASE}-epochfs (labels: release=prometheus)" in on
    assert f"PrometheusRule monitoring/{RELEASE}-epochfs-{NAMESPACE};" in on
    bare = notes({"metrics": {"podMonitor": {"enabled": True}}})
    assert f"PodMonitor {NAMESPACE}/{RELEASE}-epochfs (no labels" in bare and "PrometheusRule" not in bare
    assert "Monitor" not in notes({})
    assert "injected" not in on + bare
    webhook = notes({"webhook": {"enabled": True}, "metrics": {"serviceMonitor": {"enabled": True}}})
    assert (f"label epochfs.io/injected-by={RELEASE}-epochfs-webhook-{NAMESPACE}): "
            f"the PodMonitor {NAMESPACE}/{RELEASE}-epochfs-injected") in webhook
    assert f"The webhook itself (job epochfs-webhook, alerted on by EpochfsWebhookDown and " \
           f"EpochfsWebhookErrors): the ServiceMonitor {NAMESPACE}/{RELEASE}-epochfs-webhook." in webhook
    assert "The webhook itself" not in on + bare


# --------------------------------------------------------------------------- the webhook's monitor

JOB_RELABELING = {"action": "replace", "targetLabel": "job", "replacement": "epochfs-webhook"}


def placed(obj: dict[str, Any], base: str) -> bool:
    """``obj`` is named ``base``: as is in the release's namespace, with the release's namespace
    appended in another (monitor_values' "monitoring"), where releases of other namespaces put
    theirs too."""
    meta = obj["metadata"]
    return meta["name"] == (base if meta["namespace"] == NAMESPACE else f"{base}-{NAMESPACE}")


def webhook_monitor(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    [monitor] = [o for o in objs if o["kind"] == kind and placed(o, f"{RELEASE}-epochfs-webhook")]
    return monitor


def labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return selector.items() <= labels.items()


@pytest.mark.parametrize(("kind", "key"),
                         [("ServiceMonitor", "serviceMonitor"), ("PodMonitor", "podMonitor")])
def test_the_webhook_is_scraped_by_a_monitor_of_the_enabled_kind(helm_bin: Path, tmp_path: Path,
                                                                 kind: str, key: str) -> None:
    """With failurePolicy Fail an unanswering webhook blocks pod creation: under kube-prometheus-stack
    its own /metrics are scraped, by a monitor of the kind and with the options of the one enabled,
    selecting the webhook's Service (or pods) on its port metrics, and nothing else."""
    objs = render(helm_bin, with_remote({"webhook": {"enabled": True},
                                         "commonLabels": {"team": "ml"},
                                         "metrics": {key: monitor_values(key)}}), tmp_path)
    monitor = webhook_monitor(objs, kind)
    crd_helpers.validate(monitor)
    assert monitor["metadata"]["namespace"] == "monitoring"
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["metadata"]["labels"]["app.kubernetes.io/component"] == "webhook"
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert endpoint_of(monitor) == {
        "port": "metrics", "path": "/metrics", "interval": "15s", "scrapeTimeout": "10s",
        "relabelings": [JOB_RELABELING, *RELABELINGS], "metricRelabelings": METRIC_RELABELINGS,
    }
    selector = monitor["spec"]["selector"]["matchLabels"]
    deployment = one(objs, "Deployment")
    pod = deployment["spec"]["template"]
    if kind == "ServiceMonitor":
        services = [o for o in objs if o["kind"] == "Service"]
        [svc] = [s for s in services if labels_match(selector, s["metadata"]["labels"])]
        assert svc["metadata"]["name"] == f"{RELEASE}-epochfs-webhook"
        assert svc["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
        [port] = [p for p in svc["spec"]["ports"] if p["name"] == endpoint_of(monitor)["port"]]
        targets = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
        assert port["targetPort"] == "metrics" and port["port"] == targets["metrics"]
    else:
        assert labels_match(selector, pod["metadata"]["labels"])
        assert not labels_match(selector, one(objs, "Job")["spec"]["template"]["metadata"]["labels"])
        assert endpoint_of(monitor)["port"] in {p["name"] for p in pod["spec"]["containers"][0]["ports"]}
    # The training pods' monitor does not scrape the webhook (no target twice).
    [training] = [o for o in objs if o["kind"] == kind and placed(o, f"{RELEASE}-epochfs")]
    assert not labels_match(training["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"])


def test_no_webhook_monitor_without_the_webhook_or_a_monitor(helm_bin: Path, tmp_path: Path) -> None:
    for values in ({"metrics": {"serviceMonitor": {"enabled": True}}},
                   {"metrics": {"podMonitor": {"enabled": True}}},
                   {"webhook": {"enabled": True}}):
        objs = render(helm_bin, with_remote(values), tmp_path)
        assert not [o for o in objs if o["kind"] in ("ServiceMonitor", "PodMonitor")
                    and o["metadata"]["name"].endswith("-webhook")], values
    defaults = render(helm_bin, with_remote({"webhook": {"enabled": True},
                                             "metrics": {"podMonitor": {"enabled": True}}}), tmp_path)
    assert endpoint_of(webhook_monitor(defaults, "PodMonitor")) == {
        "port": "metrics", "path": "/metrics", "interval": "30s", "relabelings": [JOB_RELABELING]}


def test_the_docs_name_the_job_target_down_sees(helm_bin: Path, tmp_path: Path) -> None:
    """A sidecar nobody scrapes is left to kube-prometheus-stack's TargetDown, which names its
    `job`: the runbook must give the job the chart's monitors really produce. They set no jobLabel
    and no relabeling of job, so the Operator's defaults apply: a ServiceMonitor's targets take the
    Service's name, a PodMonitor's `<its namespace>/<its name>`; none is `epochfs`."""
    from common import ROOT

    doc = (ROOT / "docs" / "metrics.md").read_text()
    section = doc.split("\n### EpochfsMountDown\n", 1)[1].split("\n### ", 1)[0]
    said = " ".join(section.split("**What to check.**", 1)[0].split())
    assert "TargetDown" in said and "job `epochfs`" not in said
    for kind, key in (("ServiceMonitor", "serviceMonitor"), ("PodMonitor", "podMonitor")):
        objs = render(helm_bin, with_remote({"metrics": {key: {"enabled": True}}}), tmp_path)
        monitor = one(objs, kind)
        assert "jobLabel" not in monitor["spec"]
        relabelings = endpoint_of(monitor).get("relabelings", [])
        assert not [r for r in relabelings if r.get("targetLabel") == "job"], relabelings
        if kind == "ServiceMonitor":
            job = one(objs, "Service")["metadata"]["name"]
        else:
            job = f"{monitor['metadata']['namespace']}/{monitor['metadata']['name']}"
        assert f"`{job}`" in said, (kind, job)


def test_the_fuse_request_baseline_is_documented_at_the_probes_pace() -> None:
    """epochfs_fuse_requests_total is mostly the supervisor's own liveness probe on an idle mount
    (a stat and a listing of the root every tick: opendir, readdir, releasedir at 1/tick each).
    The metric's row and the dashboard panel that plots it give that baseline, at the tick the
    supervisor really uses, so operators read a trainer's load above it."""
    import inspect
    import json

    from common import ROOT

    from epochfs.sidecar.supervisor.core import Supervisor

    tick = inspect.signature(Supervisor.__init__).parameters["tick"].default
    per_second = round(1 / tick)
    doc = (ROOT / "docs" / "metrics.md").read_text()
    [row] = [line for line in doc.splitlines() if line.startswith("| `epochfs_fuse_requests_total{op}` |")]
    dashboard = json.loads((CHART / "dashboards" / "epochfs.json").read_text())
    panels = [p for top in dashboard["panels"] for p in [top, *top.get("panels", [])]]
    [panel] = [p for p in panels if any("epochfs_fuse_requests_total" in t.get("expr", "")
                                        for t in p.get("targets", []))]
    for text in (row, panel["description"]):
        assert f"every {tick:g} s" in text and f"about {per_second}/s" in text, text
        assert all(op in text for op in ("opendir", "readdir", "releasedir")), text
