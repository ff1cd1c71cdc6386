"""The injected sidecar's metrics port has a name of epochfs' own, and the chart's PodMonitor of
injected pods scrapes that name only.

Why: the Prometheus Operator matches a PodMonitor endpoint's ``port`` by container port NAME in
every container of the pods it selects. The injected pods are the users' (a KubeRay worker, a
PyTorchJob's): one whose own container names a port ``metrics`` (KubeRay's workers do, 8080) was
scraped twice under the epochfs job, its own metrics as epochfs'. Served for real: the profiles the
real helm renders, AdmissionReview v1 over HTTPS to ``epochfs webhook``'s server, the patch applied
(jsonpatch) and the result validated against the Kubernetes schema.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from helm_helpers import render
from test_webhook_server import Served, refused, serve, validate
from webhook_helpers import (
    chart_values,
    job,
    job_pod,
    profile_documents,
    rayjob,
    rayjob_worker_pod,
    write_profiles,
)

OWN_NAME = "epochfs-metrics"
MONITOR = {"enabled": True, "namespace": "monitoring"}


def is_port_name(name: str) -> bool:
    """Kubernetes' IsValidPortName (IANA_SVC_NAME): at most 15 characters, lowercase letters,
    digits and single hyphens, at least one letter, no hyphen at either end."""
    return (len(name) <= 15 and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name) is not None
            and re.search(r"[a-z]", name) is not None)



@pytest.fixture(scope="module")
def rendered(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    values = chart_values({"metrics": {"podMonitor": MONITOR}})
    return render(helm_bin, values, tmp_path_factory.mktemp("render"))


@pytest.fixture(scope="module")
def served(rendered: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    profiles = write_profiles(profile_documents(rendered), tmp_path_factory.mktemp("profiles"))
    yield from serve(profiles, tmp_path_factory.mktemp("tls"))


def admitted(served: Served, pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the API server stores it after the webhook's patch, checked against the schema."""
    validate(pod)
    response = served.client.review(pod)["response"]
    assert response["allowed"] is True, response
    mutated: dict[str, Any] = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    validate(mutated)
    return mutated


def injected_monitor_ports(rendered: list[dict[str, Any]]) -> list[str]:
    [pm] = [o for o in rendered if o["kind"] == "PodMonitor" and "-injected" in o["metadata"]["name"]]
    return [e["port"] for e in pm["spec"]["podMetricsEndpoints"]]


def ports_named(pod: dict[str, Any], names: list[str]) -> list[tuple[str, int]]:
    """(container, port) of every container port the endpoint names match, init containers
    included: what the Operator's pod discovery turns into targets, one each."""
    spec = pod["spec"]
    return [(c["name"], p["containerPort"]) for c in spec.get("initContainers", []) + spec["containers"]
            for p in c.get("ports", []) if p.get("name") in names]


def probe_ports(container: dict[str, Any]) -> list[Any]:
    return [container[k][h]["port"] for k in ("startupProbe", "readinessProbe", "livenessProbe")
            if k in container for h in ("httpGet", "tcpSocket") if h in container[k]]


@pytest.mark.parametrize("profile", ["default", "folder", "quiet", "ray"])
def test_the_injected_sidecar_names_its_port_as_no_workload_would(served: Served, profile: str) -> None:
    pod = admitted(served, job_pod(job(annotations={"epochfs.io/profile": profile})))
    [side] = pod["spec"]["initContainers"]
    [port] = side["ports"]
    assert port["name"] == OWN_NAME and is_port_name(OWN_NAME)
    assert probe_ports(side) and set(probe_ports(side)) == {OWN_NAME}  # the probes follow the name
    assert port["containerPort"] == (8090 if profile == "ray" else 8080)


def test_the_injected_pod_monitor_scrapes_that_name(rendered: list[dict[str, Any]]) -> None:
    assert injected_monitor_ports(rendered) == [OWN_NAME]


def test_a_kuberay_worker_with_its_own_metrics_port_is_scraped_once(
        served: Served, rendered: list[dict[str, Any]]) -> None:
    """KubeRay names its worker's port 8080 ``metrics``: the injected monitor's endpoint matches
    the sidecar's port alone, and the worker's port stays as it was."""
    pod = admitted(served, rayjob_worker_pod(rayjob(annotations={"epochfs.io/profile": "ray"})))
    assert ports_named(pod, injected_monitor_ports(rendered)) == [("epochfs", 8090)]
    assert ports_named(pod, ["metrics"]) == [("ray-worker", 8080)]


def test_a_pod_with_a_port_named_as_the_sidecars_is_refused(served: Served) -> None:
    pod = job_pod(job())
    pod["spec"]["containers"][0]["ports"] = [{"name": OWN_NAME, "containerPort": 9100}]
    text = refused(served.client, pod)
    assert f"port named {OWN_NAME!r}" in text and "rename it" in text, text
