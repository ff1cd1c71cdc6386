"""The chart's names that must be unique beyond the release's namespace, rendered by the real helm.

Release names are unique only within a namespace: the same release installed in two namespaces
must not share the name of a cluster-scoped object (helm refuses the second install, or an
``kubectl apply`` takes over the first's webhook), nor of an object both put in one shared
namespace (monitors and rules in ``metrics.*.namespace``), nor the label by which the chart's
PodMonitor finds injected pods in every namespace (each release would scrape the other's pods).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_helpers import CHART, RELEASE, helm, with_remote

INJECTED_BY = "epochfs.io/injected-by"
VALUES = with_remote({
    "webhook": {"enabled": True},
    "metrics": {"serviceMonitor": {"enabled": True}},
})


def render_in(helm_bin: Path, tmp: Path, namespace: str, values: dict[str, Any],
              release: str = RELEASE) -> list[dict[str, Any]]:
    text = helm(helm_bin, "template", release, str(CHART), "--namespace", namespace,
                values=values, tmp=tmp).stdout
    return [d for d in yaml.safe_load_all(text) if d]


def cluster_scoped(objs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(kind, name) of every object the chart renders without a namespace."""
    return {(o["kind"], o["metadata"]["name"]) for o in objs if "namespace" not in o["metadata"]}


def injected_by(objs: list[dict[str, Any]]) -> set[str]:
    """The label values the injection documents give pods and the PodMonitor selects."""
    out = set()
    for o in objs:
        if o["kind"] == "PodMonitor" and o["metadata"]["name"].endswith("-injected"):
            out.add(o["spec"]["selector"]["matchLabels"][INJECTED_BY])
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-webhook-profiles"):
            for doc in o["data"].values():
                out.add(json.loads(doc)["podLabels"][INJECTED_BY])
    return out


def test_one_release_name_in_two_namespaces_shares_no_cluster_wide_name(
    helm_bin: Path, tmp_path: Path
) -> None:
    first = render_in(helm_bin, tmp_path, "team-a", VALUES)
    second = render_in(helm_bin, tmp_path, "team-b", VALUES)
    assert ("MutatingWebhookConfiguration", f"{RELEASE}-epochfs-webhook-team-a") in cluster_scoped(first)
    assert cluster_scoped(first) and not cluster_scoped(first) & cluster_scoped(second)
    assert injected_by(first) == {f"{RELEASE}-epochfs-webhook-team-a"}
    assert injected_by(second) == {f"{RELEASE}-epochfs-webhook-team-b"}


def test_a_long_release_and_namespace_still_give_distinct_names_within_63_characters(
    helm_bin: Path, tmp_path: Path
) -> None:
    release = "r" * 40
    names = []
    for namespace in ("n" * 60 + "-a", "n" * 60 + "-b"):
        objs = render_in(helm_bin, tmp_path, namespace, VALUES, release=release)
        [(_, name)] = cluster_scoped(objs)
        assert len(name) <= 63 and injected_by(objs) == {name}
        names.append(name)
    assert names[0] != names[1]


def test_webhook_cluster_name_sets_the_name_and_the_label(helm_bin: Path, tmp_path: Path) -> None:
    values = with_remote({**VALUES, "webhook": {"enabled": True, "clusterName": "epochfs-team-a"}})
    objs = render_in(helm_bin, tmp_path, "team-a", values)
    assert cluster_scoped(objs) == {("MutatingWebhookConfiguration", "epochfs-team-a")}
    assert injected_by(objs) == {"epochfs-team-a"}


@pytest.mark.parametrize("name", ["Team_A", "x" * 64, "-a", 7])
def test_the_schema_refuses_a_cluster_name_that_is_no_dns_label(
    helm_bin: Path, tmp_path: Path, name: object
) -> None:
    values = with_remote({"webhook": {"enabled": True, "clusterName": name}})
    proc = helm(helm_bin, "template", RELEASE, str(CHART), values=values, tmp=tmp_path, check=False)
    assert proc.returncode != 0 and "clusterName" in proc.stderr, proc.stderr


SHARED = "monitoring"


@pytest.mark.parametrize("monitor", ["serviceMonitor", "podMonitor"])
def test_monitors_in_a_shared_namespace_do_not_collide(helm_bin: Path, tmp_path: Path, monitor: str) -> None:
    values = with_remote({
        "webhook": {"enabled": True},
        "metrics": {monitor: {"enabled": True, "namespace": SHARED},
                    "prometheusRule": {"enabled": True, "namespace": SHARED}},
    })
    placed = []
    for namespace in ("team-a", "team-b"):
        objs = render_in(helm_bin, tmp_path, namespace, values)
        there = {(o["kind"], o["metadata"]["name"]) for o in objs
                 if o["metadata"].get("namespace") == SHARED}
        # The two monitors of the chart (its pods', the webhook's), injected pods', the rules.
        assert len(there) == 4 and all(name.endswith(f"-{namespace}") for _, name in there), there
        placed.append(there)
    assert not placed[0] & placed[1]


def test_monitors_in_the_releases_namespace_keep_their_names(helm_bin: Path, tmp_path: Path) -> None:
    values = with_remote({"webhook": {"enabled": True},
                          "metrics": {"serviceMonitor": {"enabled": True, "namespace": "team-a"},
                                      "prometheusRule": {"enabled": True}}})
    objs = render_in(helm_bin, tmp_path, "team-a", values)
    names = {(o["kind"], o["metadata"]["name"]) for o in objs
             if o["kind"] in ("ServiceMonitor", "PodMonitor", "PrometheusRule")}
    assert names == {("ServiceMonitor", f"{RELEASE}-epochfs"),
                     ("PodMonitor", f"{RELEASE}-epochfs-injected"),
                     ("ServiceMonitor", f"{RELEASE}-epochfs-webhook"),
                     ("PrometheusRule", f"{RELEASE}-epochfs")}


def test_one_port_for_the_webhooks_https_and_metrics_is_refused(helm_bin: Path, tmp_path: Path) -> None:
    """The server binds both ports: the same number twice would crash-loop its pods."""
    values = with_remote({"webhook": {"enabled": True, "port": 9443, "metricsPort": 9443}})
    proc = helm(helm_bin, "template", RELEASE, str(CHART), values=values, tmp=tmp_path, check=False)
    assert proc.returncode != 0 and "webhook.port and webhook.metricsPort are both 9443" in proc.stderr
