"""The chart's alerts, checked by the real tools: `promtool check rules` and `promtool test rules` on
the rule group the real helm renders (so what the tests run is what the chart ships), every alert
covered by a unit test that makes it fire, the rule file being the one source, expressions naming
only metrics the sidecar exports, and a runbook section for each alert in docs/metrics.md.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import crd_helpers
import pytest
import yaml
from common import ROOT
from helm_helpers import CHART, NAMESPACE, helm, one, render, with_remote
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from epochfs.fuse.metrics import FuseMetrics
from epochfs.sidecar import metrics
from epochfs.sidecar.store import Policy, Store

RULE_FILE = CHART / "alerts" / "epochfs.rules.yaml"
UNIT_TESTS = Path(__file__).resolve().parent / "alerts_test.yaml"
METRICS_DOC = ROOT / "docs" / "metrics.md"
ENABLED = {"metrics": {"prometheusRule": {"enabled": True}}}
# The webhook's group (epochfs-webhook) ships only where the chart's monitor scrapes the webhook.
WEBHOOK_GROUP = "epochfs-webhook"
WITH_WEBHOOK = {"webhook": {"enabled": True},
                "metrics": {"prometheusRule": {"enabled": True}, "serviceMonitor": {"enabled": True}}}


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is required (Debian: apt-get install prometheus)"
    return found


def rendered_rule(helm_bin: Path, tmp: Path, values: dict[str, Any] | None = None) -> dict[str, Any]:
    return one(render(helm_bin, with_remote(values or ENABLED), tmp), "PrometheusRule")


@pytest.fixture(scope="module")
def rules_dir(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the chart's rendered rule group as a rule file and the unit tests beside it."""
    tmp = tmp_path_factory.mktemp("alerts")
    rule = rendered_rule(helm_bin, tmp, WITH_WEBHOOK)
    groups = {"groups": rule["spec"]["groups"]}
    (tmp / "epochfs.rules.yaml").write_text(yaml.safe_dump(groups, sort_keys=False))
    shutil.copy(UNIT_TESTS, tmp / UNIT_TESTS.name)
    return tmp


def alerts(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for g in doc["groups"] for r in g["rules"]]


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=120)


# --------------------------------------------------------------------------- promtool


def test_promtool_check_rules_accepts_what_the_chart_renders(promtool: str, rules_dir: Path) -> None:
    count = len(alerts(yaml.safe_load(RULE_FILE.read_text())))
    assert count >= 6
    proc = run([promtool, "check", "rules", "epochfs.rules.yaml"], rules_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {count} rules found" in proc.stdout


def test_promtool_check_rules_rejects_a_broken_expression(promtool: str, rules_dir: Path,
                                                          tmp_path: Path) -> None:
    doc = yaml.safe_load((rules_dir / "epochfs.rules.yaml").read_text())
    doc["groups"][0]["rules"][0]["expr"] = "rate(epochfs_cuts_total[5m]"
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump(doc))
    proc = run([promtool, "check", "rules", "broken.yaml"], tmp_path)
    assert proc.returncode != 0 and "FAILED" in proc.stdout + proc.stderr


def test_promtool_unit_tests_pass(promtool: str, rules_dir: Path) -> None:
    proc = run([promtool, "test", "rules", UNIT_TESTS.name], rules_dir)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def unit_tests() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(UNIT_TESTS.read_text())
    return doc


def test_every_alert_has_a_unit_test_that_fires_it_and_one_that_does_not() -> None:
    names = {r["alert"] for r in alerts(yaml.safe_load(RULE_FILE.read_text()))}
    cases = [c for t in unit_tests()["tests"] for c in t.get("alert_rule_test", [])]
    fired = {c["alertname"] for c in cases if c.get("exp_alerts")}
    quiet = {c["alertname"] for c in cases if not c.get("exp_alerts")}
    assert fired == names, f"no firing case for {names - fired}; cases for unknown alerts: {fired - names}"
    assert quiet >= names, f"no case where {names - quiet} stays quiet"
    for case in cases:
        for exp in case.get("exp_alerts", []):
            assert {"summary", "description", "runbook_url"} <= set(exp["exp_annotations"]), case


def test_the_unit_tests_fail_when_an_alert_does_not_fire(promtool: str, rules_dir: Path,
                                                         tmp_path: Path) -> None:
    """Expecting silence where each alert should fire makes promtool fail for every one of them:
    each firing case really depends on the rule."""
    shutil.copy(rules_dir / "epochfs.rules.yaml", tmp_path)
    doc = unit_tests()
    for test in doc["tests"]:
        for case in test.get("alert_rule_test", []):
            case["exp_alerts"] = []
    (tmp_path / "silent_test.yaml").write_text(yaml.safe_dump(doc))
    proc = run([promtool, "test", "rules", "silent_test.yaml"], tmp_path)
    assert proc.returncode != 0
    names = {r["alert"] for r in alerts(yaml.safe_load(RULE_FILE.read_text()))}
    failed = set(re.findall(r"alertname: (\w+), time:", proc.stdout + proc.stderr))
    assert failed == names, proc.stdout


# --------------------------------------------------------------------------- one source


def test_the_chart_ships_the_rule_file_unchanged_by_default(helm_bin: Path, tmp_path: Path) -> None:
    rule = rendered_rule(helm_bin, tmp_path, WITH_WEBHOOK)
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["spec"]["groups"] == yaml.safe_load(RULE_FILE.read_text())["groups"]


@pytest.mark.parametrize("monitor", ["serviceMonitor", "podMonitor"])
def test_the_webhook_alerts_ship_only_where_the_chart_scrapes_the_webhook(
        helm_bin: Path, tmp_path: Path, monitor: str) -> None:
    """EpochfsWebhookDown fires on an absent job: without the webhook, or without the monitor that
    scrapes it as that job, the group would page for nothing, so it is left out (the rest is the file)."""
    file_groups = yaml.safe_load(RULE_FILE.read_text())["groups"]
    assert WEBHOOK_GROUP in {g["name"] for g in file_groups}
    others = [g for g in file_groups if g["name"] != WEBHOOK_GROUP]
    scraped = {"webhook": {"enabled": True},
               "metrics": {"prometheusRule": {"enabled": True}, monitor: {"enabled": True}}}
    assert rendered_rule(helm_bin, tmp_path, scraped)["spec"]["groups"] == file_groups
    unscraped: list[dict[str, Any]] = [
        ENABLED,
        {"webhook": {"enabled": True}, **ENABLED},
        {"metrics": {"prometheusRule": {"enabled": True}, monitor: {"enabled": True}}},
        # (The ServiceMonitor without the metrics Service it needs is refused at render:
        # test_helm_review_refusals.py.)
    ]
    for values in unscraped:
        assert rendered_rule(helm_bin, tmp_path, values)["spec"]["groups"] == others, values


def test_the_rule_renders_only_when_enabled(helm_bin: Path, tmp_path: Path) -> None:
    for values in ({}, {"metrics": {"serviceMonitor": {"enabled": True}}}, {"job": {"enabled": False}}):
        kinds = {o["kind"] for o in render(helm_bin, with_remote(values), tmp_path)}
        assert "PrometheusRule" not in kinds, values
    assert rendered_rule(helm_bin, tmp_path)["metadata"]["namespace"] == NAMESPACE
    # Shared objects only (job.enabled=false): the rule still renders, for a parent's workloads.
    only_shared = {"job": {"enabled": False}, **ENABLED}
    assert rendered_rule(helm_bin, tmp_path, only_shared)["spec"]["groups"]


def test_rule_options_labels_namespace_rule_labels_disabled_runbook(helm_bin: Path, tmp_path: Path) -> None:
    values = {"webhook": {"enabled": True}, "metrics": {"podMonitor": {"enabled": True}, "prometheusRule": {
        "enabled": True, "namespace": "monitoring", "labels": {"release": "prometheus"},
        "ruleLabels": {"team": "ml", "severity": "page"}, "disabled": ["EpochfsTrainersWaitingForData"],
        "runbookUrl": "https://wiki.example/epochfs",
    }}}
    rule = rendered_rule(helm_bin, tmp_path, values)
    assert rule["metadata"]["namespace"] == "monitoring"
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    assert rule["metadata"]["labels"]["app.kubernetes.io/name"] == "epochfs"
    source = {r["alert"]: r for r in alerts(yaml.safe_load(RULE_FILE.read_text()))}
    shipped = {r["alert"]: r for r in alerts(rule["spec"])}
    assert set(shipped) == set(source) - {"EpochfsTrainersWaitingForData"}
    for name, r in shipped.items():
        assert r["labels"] == {**source[name]["labels"], "team": "ml"}  # its own severity wins
        assert r["annotations"]["runbook_url"] == f"https://wiki.example/epochfs#{name.lower()}"
        assert {k: v for k, v in r.items() if k not in ("labels", "annotations")} == \
               {k: v for k, v in source[name].items() if k not in ("labels", "annotations")}
    crd_helpers.validate(rule)
    # A name that is no alert is refused with the list of alerts.
    bad = copy.deepcopy(values)
    bad["metrics"]["prometheusRule"]["disabled"] = ["EpochfsNoSuchAlert"]
    proc = helm(helm_bin, "template", "mnist", str(CHART), values=with_remote(bad), tmp=tmp_path, check=False)
    assert proc.returncode != 0 and "no alert named EpochfsNoSuchAlert" in proc.stderr
    assert "EpochfsDiskFull" in proc.stderr


def test_the_rendered_rule_validates_against_the_operator_crd(helm_bin: Path, tmp_path: Path) -> None:
    rule = rendered_rule(helm_bin, tmp_path)
    crd_helpers.validate(rule)
    broken = copy.deepcopy(rule)
    broken["spec"]["groups"][0]["rules"][0]["fore"] = "5m"  # a typo the strict schema catches
    with pytest.raises(Exception, match="fore"):
        crd_helpers.validate(broken)


def test_helm_lint_passes_with_every_monitoring_option(helm_bin: Path, tmp_path: Path) -> None:
    values = with_remote({"metrics": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}, "scrapeTimeout": "10s",
                           "relabelings": [{"action": "labeldrop", "regex": "container"}]},
        "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"},
                           "ruleLabels": {"team": "ml"}},
    }})
    proc = helm(helm_bin, "lint", "--strict", str(CHART), values=values, tmp=tmp_path)
    assert "0 chart(s) failed" in proc.stdout
    wrong = with_remote({"metrics": {"prometheusRule": {"enabled": "yes"}}})
    proc = helm(helm_bin, "lint", "--strict", str(CHART), values=wrong, tmp=tmp_path, check=False)
    assert proc.returncode != 0 and "enabled" in proc.stdout + proc.stderr


def test_the_packaged_chart_holds_the_rule_file(helm_bin: Path, tmp_path: Path) -> None:
    import tarfile

    helm(helm_bin, "package", str(CHART), "-d", str(tmp_path), tmp=tmp_path)
    [tgz] = tmp_path.glob("epochfs-*.tgz")
    with tarfile.open(tgz) as t:
        names = set(t.getnames())
    assert {"epochfs/alerts/epochfs.rules.yaml", "epochfs/templates/prometheusrule.yaml",
            "epochfs/templates/podmonitor.yaml"} <= names


# --------------------------------------------------------------------------- what the rules say


def exported_series_names(cache_dir: Path) -> set[str]:
    """Every series name the sidecar's /metrics can hold, from the real metric classes: the store
    (with an epoch cut, so its epoch gauges exist), the sampler's and the FUSE server's
    per-process metrics, the supervisor's."""
    store = Store(cache_dir, create=True)
    store.configure(Policy(capacity=1000, keep_epochs=1, headroom=0.0))
    children = CollectorRegistry()
    metrics.ProcessMetrics(registry=children)
    metrics.OutageGauges(registry=children)
    FuseMetrics(registry=children)
    sidecar = metrics.SidecarMetrics(registry=CollectorRegistry())
    registry = metrics.sidecar_registry(stats=store.stats, multiproc_dir=None, sidecar=sidecar)
    from prometheus_client import generate_latest

    webhook = metrics.WebhookMetrics()
    text = generate_latest(registry).decode() + generate_latest(children).decode() \
        + generate_latest(webhook.registry).decode()
    suffixes = {"counter": ["_total"], "gauge": [""], "histogram": ["_bucket", "_sum", "_count"],
                "info": ["_info"]}
    return {f.name + s for f in text_string_to_metric_families(text) for s in suffixes.get(f.type, [""])}


# The one expression on Prometheus' own series: the scrape of the webhook, as its monitor names it.
SCRAPE_OF_THE_WEBHOOK = 'up{job="epochfs-webhook"}'


def test_every_expression_names_only_exported_metrics(cache_dir: Path) -> None:
    exported = exported_series_names(cache_dir)
    for rule in alerts(yaml.safe_load(RULE_FILE.read_text())):
        used = set(re.findall(r"\bepochfs_[a-z0-9_]+", rule["expr"]))
        if not used:  # only the webhook's scrape, and only for the job its monitor sets
            assert rule["alert"] == "EpochfsWebhookDown", rule["alert"]
            assert set(re.findall(r"\bup\{[^}]*\}", rule["expr"])) == {SCRAPE_OF_THE_WEBHOOK}
            continue
        assert used <= exported, f"{rule['alert']}: {used - exported} not exported"


def test_the_webhook_alerts_job_is_the_one_its_monitor_sets(helm_bin: Path, tmp_path: Path) -> None:
    """EpochfsWebhookDown watches the job the chart's webhook monitor gives its targets, first of
    its relabelings (the monitor's own come after, and could rename it on purpose)."""
    rules = {r["alert"]: r for r in alerts(yaml.safe_load(RULE_FILE.read_text()))}
    for monitor, kind, key in (("serviceMonitor", "ServiceMonitor", "endpoints"),
                               ("podMonitor", "PodMonitor", "podMetricsEndpoints")):
        values = {"webhook": {"enabled": True}, "metrics": {monitor: {"enabled": True}}}
        objs = render(helm_bin, with_remote(values), tmp_path)
        [mon] = [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith("-webhook")]
        [endpoint] = mon["spec"][key]
        assert endpoint["relabelings"][0] == {"action": "replace", "targetLabel": "job",
                                              "replacement": "epochfs-webhook"}
        job = endpoint["relabelings"][0]["replacement"]
        assert f'up{{job="{job}"}}' in rules["EpochfsWebhookDown"]["expr"]
        assert f'absent(up{{job="{job}"}})' in rules["EpochfsWebhookDown"]["expr"]


def test_the_name_check_would_catch_an_invented_metric(cache_dir: Path) -> None:
    exported = exported_series_names(cache_dir)
    assert "epochfs_sampler_progress_total" not in exported
    assert "epochfs_disk_full" in exported and "epochfs_client_wait_seconds_total" in exported
    assert "epochfs_webhook_requests_total" in exported


def github_anchor(heading: str) -> str:
    """The id GitHub gives a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def test_every_alert_has_severity_annotations_and_a_runbook_section() -> None:
    doc = METRICS_DOC.read_text()
    anchors = {github_anchor(h) for h in re.findall(r"^#{2,4} (.+)$", doc, flags=re.M)}
    base = "https://github.com/epochfs/epochfs/blob/main/docs/metrics.md#"
    for rule in alerts(yaml.safe_load(RULE_FILE.read_text())):
        name = rule["alert"]
        assert re.fullmatch(r"Epochfs[A-Z][A-Za-z]+", name), name
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        ann = rule["annotations"]
        assert ann["summary"] and len(ann["description"]) > 60, name
        assert ann["runbook_url"] == base + name.lower(), name
        assert name.lower() in anchors, f"docs/metrics.md has no section '{name}'"
        section = doc.split(f"\n### {name}\n", 1)[1].split("\n### ", 1)[0]
        for part in ("What it means", "What to check", "What to do"):
            assert f"**{part}.**" in section, f"{name}'s runbook has no '{part}'"
        assert f"| `{name}` |" in doc, f"{name} missing from the alerts table"


# --------------------------------------------------------------------------- tuned by values


def waiting_unit_test(threshold_percent: str) -> dict[str, Any]:
    """A promtool unit test of EpochfsTrainersWaitingForData at another threshold: 4-GPU pods whose
    ranks wait 50% and 75% of their time, and a pod without GPUs waiting 75%."""
    def series(pod: str, wait_per_minute: int, gpus: int | None) -> list[dict[str, str]]:
        out = [{"series": f'epochfs_client_wait_seconds_total{{namespace="training", pod="{pod}"}}',
                "values": f"0+{wait_per_minute}x40"}]
        if gpus is not None:
            out.append({"series": f'kube_pod_container_resource_requests{{namespace="training", pod="{pod}", '
                                  f'container="trainer", resource="nvidia_com_gpu", unit="integer"}}',
                        "values": f"{gpus}+0x40"})
        return out

    def fired(pod: str) -> dict[str, Any]:
        return {"exp_labels": {"severity": "warning", "namespace": "training", "pod": pod},
                "exp_annotations": {
                    "summary": f"trainers wait for data more than {threshold_percent} of their time",
                    "description": f"The training loops of training/{pod} waited for data 75% of the "
                                   "time over the last 10 minutes (per rank: the pod's wait over the "
                                   "GPUs or other accelerators it requests): they are starved.",
                    "runbook_url": "https://github.com/epochfs/epochfs/blob/main/docs/metrics.md"
                                   "#epochfstrainerswaitingfordata"}}

    return {"rule_files": ["epochfs.rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": series("half", 120, 4) + series("three-quarters", 180, 4) + series("cpu", 45, None),
        "alert_rule_test": [{"eval_time": "30m", "alertname": "EpochfsTrainersWaitingForData",
                             "exp_alerts": [fired("cpu"), fired("three-quarters")]}],
    }]}


def test_the_trainers_waiting_threshold_is_a_value(helm_bin: Path, promtool: str, tmp_path: Path) -> None:
    """metrics.prometheusRule.trainersWaitingThreshold (a share of each rank's time) replaces the
    file's 0.25 in the expression and 25% in the summary; promtool runs the rule as rendered."""
    values = {"webhook": {"enabled": True},
              "metrics": {"serviceMonitor": {"enabled": True},
                          "prometheusRule": {"enabled": True, "trainersWaitingThreshold": 0.6}}}
    rule = rendered_rule(helm_bin, tmp_path, values)
    rules = {r["alert"]: r for r in alerts(rule["spec"])}
    waiting = rules["EpochfsTrainersWaitingForData"]
    assert waiting["expr"].rstrip().endswith(") > 0.6"), waiting["expr"]
    assert waiting["annotations"]["summary"] == "trainers wait for data more than 60% of their time"
    source = {r["alert"]: r for r in alerts(yaml.safe_load(RULE_FILE.read_text()))}
    assert {k: v for k, v in rules.items() if k != "EpochfsTrainersWaitingForData"} == {
        k: {**v, "annotations": rules[k]["annotations"]} for k, v in source.items()
        if k != "EpochfsTrainersWaitingForData"}
    (tmp_path / "epochfs.rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    (tmp_path / "waiting_test.yaml").write_text(yaml.safe_dump(waiting_unit_test("60%"), sort_keys=False))
    proc = run([promtool, "test", "rules", "waiting_test.yaml"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The same pods at the default threshold: the half-waiting pod fires too.
    rule = rendered_rule(helm_bin, tmp_path)
    (tmp_path / "epochfs.rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    proc = run([promtool, "test", "rules", "waiting_test.yaml"], tmp_path)
    assert proc.returncode != 0 and 'pod="half"' in proc.stdout + proc.stderr


@pytest.mark.parametrize("threshold", [0, 1, 1.5, -0.1, "a quarter"])
def test_the_schema_refuses_a_threshold_outside_zero_to_one(helm_bin: Path, tmp_path: Path,
                                                            threshold: Any) -> None:
    values = {"metrics": {"prometheusRule": {"enabled": True, "trainersWaitingThreshold": threshold}}}
    proc = helm(helm_bin, "template", "mnist", str(CHART), values=with_remote(values), tmp=tmp_path,
                check=False)
    assert proc.returncode != 0 and "trainersWaitingThreshold" in proc.stderr


def test_the_stalled_alerts_idle_gauge_is_the_samplers() -> None:
    """epochfs_sampler_idle, which keeps EpochfsSamplerStalled quiet while the sampler waits by
    design, exists from the start at 0 and follows ProcessMetrics.set_idle."""
    registry = CollectorRegistry()
    process = metrics.ProcessMetrics(registry=registry)
    assert registry.get_sample_value("epochfs_sampler_idle") == 0
    process.set_idle(True)
    assert registry.get_sample_value("epochfs_sampler_idle") == 1
    process.set_idle(True)
    process.set_idle(False)
    assert registry.get_sample_value("epochfs_sampler_idle") == 0
