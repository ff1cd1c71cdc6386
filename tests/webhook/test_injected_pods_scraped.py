"""The pods the admission webhook injects are scraped, once (issue 23): the chart is rendered by the
real helm with the webhook and a ServiceMonitor or a PodMonitor; pods of a Job, a PyTorchJob and a
RayJob, in the release's namespace and in others, go through the webhook's decision with the
profiles the chart rendered, their JSONPatch applied (jsonpatch); then every rendered monitor is
resolved as the Prometheus Operator does (a ServiceMonitor through the Services it selects and
their pod selectors, a PodMonitor straight to the pods; namespaceSelector; the endpoint's port by
name among the pod's container ports) to the monitors that scrape each pod's sidecar.

Before the webhook labelled the pods it injects, no monitor selected them: the monitors select the
chart's own pod labels, in the release's namespace only.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import crd_helpers
import jsonpatch
import pytest
from helm_helpers import NAMESPACE, RELEASE, as_pod, render, workload_of
from webhook_helpers import (
    INJECT_LABEL,
    chart_values,
    job,
    job_pod,
    profile_documents,
    pytorchjob,
    pytorchjob_worker_pod,
    rayjob,
    rayjob_worker_pod,
)

from epochfs.sidecar.webhook.mutate import decide
from epochfs.sidecar.webhook.profiles import Profile, profiles_from_documents

MONITOR_KINDS = ("ServiceMonitor", "PodMonitor")
MONITOR = {"enabled": True, "labels": {"release": "prometheus"}, "namespace": "monitoring",
           "interval": "15s", "relabelings": [{"action": "labeldrop", "regex": "container"}]}
# The monitors are in another namespace than the release's: their names end with the release's.
OWN_MONITOR = f"{RELEASE}-epochfs-{NAMESPACE}"
INJECTED_MONITOR = f"{RELEASE}-epochfs-injected-{NAMESPACE}"


@pytest.fixture(scope="module", params=["serviceMonitor", "podMonitor"])
def rendered(request: pytest.FixtureRequest, helm_bin: Path,
             tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    values = chart_values({"metrics": {request.param: MONITOR}})
    return render(helm_bin, values, tmp_path_factory.mktemp(request.param))


@pytest.fixture(scope="module")
def profiles(rendered: list[dict[str, Any]]) -> dict[str, Profile]:
    return profiles_from_documents(profile_documents(rendered))


# --------------------------------------------------------------------------- the Operator's view


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels and matchExpressions) against a label map; an empty
    selector selects everything, as in Kubernetes."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def in_namespaces(monitor: dict[str, Any], namespace: str) -> bool:
    """The monitor's namespaceSelector: any, matchNames, or (absent) the monitor's own namespace."""
    ns = monitor["spec"].get("namespaceSelector", {})
    if ns.get("any"):
        return True
    return namespace in ns.get("matchNames", [monitor["metadata"]["namespace"]])


def port_names(pod: dict[str, Any]) -> set[str]:
    """Container port names of the pod: Prometheus' pod discovery lists init containers' ports too
    (a native sidecar is one)."""
    spec = pod["spec"]
    return {p["name"] for c in spec.get("containers", []) + spec.get("initContainers", [])
            for p in c.get("ports", []) if "name" in p}


def port_numbers(pod: dict[str, Any]) -> set[int]:
    """Container port numbers of the pod, a Service's numeric ``targetPort`` (the chart's metrics
    Service names the native sidecar's port by its number: kubernetes#127958)."""
    spec = pod["spec"]
    return {p["containerPort"] for c in spec.get("containers", []) + spec.get("initContainers", [])
            for p in c.get("ports", [])}


def named_ports(pod: dict[str, Any], names: set[str]) -> int:
    """How many container ports of the pod (init containers' too) have one of ``names``: a
    PodMonitor endpoint makes a target of each."""
    spec = pod["spec"]
    return sum(1 for c in spec.get("containers", []) + spec.get("initContainers", [])
               for p in c.get("ports", []) if p.get("name") in names)


def scrapers(objs: list[dict[str, Any]], pod: dict[str, Any]) -> list[str]:
    """Names of the monitors that make a scrape target of the pod, once per target: a PodMonitor
    once per container port its endpoints name (a workload's own port of that name is one more)."""
    namespace = pod["metadata"]["namespace"]
    labels = pod["metadata"].get("labels", {})
    found = []
    for m in (o for o in objs if o["kind"] == "PodMonitor"):
        ports = {e["port"] for e in m["spec"]["podMetricsEndpoints"]}
        if in_namespaces(m, namespace) and selects(m["spec"]["selector"], labels):
            found += [m["metadata"]["name"]] * named_ports(pod, ports)
    services = [o for o in objs if o["kind"] == "Service"]
    for m in (o for o in objs if o["kind"] == "ServiceMonitor"):
        ports = {e["port"] for e in m["spec"]["endpoints"]}
        for svc in services:
            svc_ns = svc["metadata"]["namespace"]
            if svc_ns != namespace or not in_namespaces(m, svc_ns):
                continue
            if not selects(m["spec"]["selector"], svc["metadata"].get("labels", {})):
                continue
            pod_selector = svc["spec"].get("selector")
            if not pod_selector or any(labels.get(k) != v for k, v in pod_selector.items()):
                continue
            targets = {p.get("targetPort") for p in svc["spec"]["ports"] if p.get("name") in ports}
            if targets & (port_names(pod) | port_numbers(pod)):
                found.append(m["metadata"]["name"])
    return found


def inject(pod: dict[str, Any], profiles: dict[str, Profile], namespace: str) -> dict[str, Any]:
    """The pod as the API server stores it after the webhook's patch, in ``namespace``."""
    pod = copy.deepcopy(pod)
    pod["metadata"]["namespace"] = namespace
    decision = decide(pod, profiles)
    assert decision.result == "mutated", decision.message
    mutated: dict[str, Any] = jsonpatch.apply_patch(pod, decision.patch)
    return mutated


# --------------------------------------------------------------------------- the tests


def workload_pods() -> dict[str, dict[str, Any]]:
    return {
        "job": job_pod(job()),
        "pytorchjob": pytorchjob_worker_pod(pytorchjob(), 1),
        # KubeRay's pods declare port 8080, the default profile's: the ray profile takes 8090.
        "rayjob": rayjob_worker_pod(rayjob(annotations={"epochfs.io/profile": "ray"})),
    }


@pytest.mark.parametrize("namespace", [NAMESPACE, "research"])
@pytest.mark.parametrize("workload", ["job", "pytorchjob", "rayjob"])
def test_an_injected_pod_is_scraped_by_one_monitor(rendered: list[dict[str, Any]],
                                                   profiles: dict[str, Profile], workload: str,
                                                   namespace: str) -> None:
    pod = inject(workload_pods()[workload], profiles, namespace)
    assert "epochfs-metrics" in port_names(pod)  # the sidecar's; KubeRay's worker has its own metrics
    assert scrapers(rendered, pod) == [INJECTED_MONITOR]


def test_every_profile_labels_its_pods_for_the_monitor(rendered: list[dict[str, Any]],
                                                       profiles: dict[str, Profile]) -> None:
    """A profile with another port (ray: 8090) or metrics.enabled=false (quiet) still names its
    port epochfs-metrics and carries the label."""
    for name in profiles:
        if profiles[name].nodes > 1:
            continue  # their shard comes from an Indexed Job's completion index
        pod = job_pod(job(annotations={"epochfs.io/profile": name}))
        assert scrapers(rendered, inject(pod, profiles, "research")) == [INJECTED_MONITOR], name


def test_the_charts_own_pods_are_not_scraped_twice(rendered: list[dict[str, Any]]) -> None:
    pod = as_pod(workload_of(rendered, "Job")["spec"]["template"], "train-0")
    assert scrapers(rendered, pod) == [OWN_MONITOR]


def test_pods_the_webhook_did_not_inject_are_not_scraped(rendered: list[dict[str, Any]],
                                                         profiles: dict[str, Profile]) -> None:
    plain = job_pod(job())
    plain["metadata"]["labels"] = {"app": "train"}
    plain["spec"]["containers"][0]["ports"] = [{"name": "metrics", "containerPort": 9100}]
    plain["metadata"]["namespace"] = "research"
    assert decide(plain, profiles).result == "skipped"
    assert scrapers(rendered, plain) == []
    # Asked for, but injected by another release's webhook: that release's monitor scrapes it.
    other = inject(job_pod(job()), profiles, "research")
    other["metadata"]["labels"]["epochfs.io/injected-by"] = "other-epochfs-webhook"
    assert scrapers(rendered, other) == []


def test_the_injected_pod_monitor_carries_the_monitors_options(rendered: list[dict[str, Any]]) -> None:
    [pm] = [o for o in rendered if o["kind"] == "PodMonitor" and o["metadata"]["name"] == INJECTED_MONITOR]
    crd_helpers.validate(pm)
    assert pm["metadata"]["namespace"] == "monitoring"
    assert pm["metadata"]["labels"]["release"] == "prometheus"
    [endpoint] = pm["spec"]["podMetricsEndpoints"]
    assert endpoint["interval"] == "15s" and endpoint["relabelings"] == MONITOR["relabelings"]
    assert pm["spec"]["namespaceSelector"] == {"any": True}


def test_no_injected_pod_monitor_without_the_webhook_or_a_monitor(helm_bin: Path, tmp_path: Path) -> None:
    for values in (chart_values(), chart_values({"webhook": {"enabled": False},
                                                 "metrics": {"podMonitor": {"enabled": True}}})):
        names = [o["metadata"]["name"] for o in render(helm_bin, values, tmp_path)
                 if o["kind"] == "PodMonitor"]
        assert INJECTED_MONITOR not in names


def test_the_label_is_only_added_where_epochfs_is_injected(profiles: dict[str, Profile]) -> None:
    """The webhook labels what it injects and nothing else: a pod asking with the label alone keeps
    its labels and gains one; a pod asking with the annotation alone (no labels) gets the map."""
    pod = job_pod(job())
    assert pod["metadata"]["labels"]["epochfs.io/inject"] == INJECT_LABEL["epochfs.io/inject"]
    mutated = inject(pod, profiles, NAMESPACE)
    added = set(mutated["metadata"]["labels"]) - set(pod["metadata"]["labels"])
    assert added == {"epochfs.io/injected-by"}
    assert mutated["metadata"]["labels"]["epochfs.io/injected-by"] == f"{RELEASE}-epochfs-webhook-{NAMESPACE}"
    bare = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "bare", "annotations": {"epochfs.io/inject": "true"}},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    assert inject(bare, profiles, NAMESPACE)["metadata"]["labels"] == {
        "epochfs.io/injected-by": f"{RELEASE}-epochfs-webhook-{NAMESPACE}"}
