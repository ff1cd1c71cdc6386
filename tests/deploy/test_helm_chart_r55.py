"""Review 55 of the chart, rendered by the real helm binary.

The `helm test` pod runs where, and pulls as, the training pod does; the schema refuses
non-string label and annotation values and invalid image tags early; names that must be cut keep
a hash of the whole so long releases stay apart (names that fit do not change); the waiting
threshold's summary keeps its digits.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from helm_helpers import CHART, RELEASE, helm, one, pod_spec, render, with_remote

PLACEMENT = {
    "imagePullSecrets": [{"name": "regcred"}],
    "nodeSelector": {"nvidia.com/gpu.present": "true"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
}


def render_release(helm_bin: Path, tmp: Path, release: str, values: dict[str, Any],
                   namespace: str = "ml") -> list[dict[str, Any]]:
    text = helm(helm_bin, "template", release, str(CHART), "--namespace", namespace,
                values=with_remote(values), tmp=tmp).stdout
    return [d for d in yaml.safe_load_all(text) if d]


def names(objs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objs}


def within_limits(objs: set[tuple[str, str]]) -> bool:
    """Every name a DNS label, but the test Pod's (a DNS subdomain: <fullname>-test-readyz)."""
    return all(len(name) <= (253 if kind == "Pod" else 63) for kind, name in objs)


def cut(name: str, limit: int) -> str:
    """What the chart's epochfs.cutName makes of a name longer than limit."""
    return f"{name[:limit - 9].removesuffix('-')}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def refusal(helm_bin: Path, tmp: Path, values: dict[str, Any]) -> str:
    proc = helm(helm_bin, "template", RELEASE, str(CHART), values=with_remote(values), tmp=tmp,
                check=False)
    assert proc.returncode != 0, proc.stdout[:200]
    return proc.stderr


# 1. The helm test pod.

def test_the_helm_test_pod_pulls_and_schedules_as_the_training_pod(helm_bin: Path, tmp_path: Path) -> None:
    """With a private registry the test pod lacked the pull secret (ImagePullBackOff), and on
    tainted or selected GPU nodes it had no toleration: `helm test` failed, the sidecars healthy."""
    objs = render(helm_bin, with_remote({**PLACEMENT, "image": {"repository": "registry.example/epochfs"}}),
                  tmp_path)
    job, test = pod_spec(objs), one(objs, "Pod")["spec"]
    for key, value in PLACEMENT.items():
        assert job[key] == value, key
        assert test.get(key) == value, key
    kubernetes_validate.validate(one(objs, "Pod"), kubernetes_validate.latest_version(), strict=True)


def test_without_placement_values_the_test_pod_has_none(helm_bin: Path, tmp_path: Path) -> None:
    test = one(render(helm_bin, with_remote({}), tmp_path), "Pod")["spec"]
    assert not {"imagePullSecrets", "nodeSelector", "tolerations"} & set(test)


# 2. String maps in the schema.

@pytest.mark.parametrize(("values", "where"), [
    ({"dashboard": {"enabled": True, "labels": {"grafana_dashboard": 1}}},
     "/dashboard/labels/grafana_dashboard"),
    ({"dashboard": {"enabled": True, "annotations": {"grafana_folder": True}}},
     "/dashboard/annotations/grafana_folder"),
    ({"serviceAccount": {"annotations": {"eks.amazonaws.com/sts-regional-endpoints": True}}},
     "/serviceAccount/annotations/eks.amazonaws.com~1sts-regional-endpoints"),
])
def test_the_schema_refuses_non_string_labels_and_annotations(
    helm_bin: Path, tmp_path: Path, values: dict[str, Any], where: str
) -> None:
    """The API server refuses them only at install, after Helm made part of the release."""
    err = refusal(helm_bin, tmp_path, values)
    assert f"at '{where}'" in err and "want string" in err, err


def test_string_labels_and_annotations_still_render(helm_bin: Path, tmp_path: Path) -> None:
    objs = render(helm_bin, with_remote({
        "dashboard": {"enabled": True, "labels": {"grafana_dashboard": "1"},
                      "annotations": {"grafana_folder": "Training"}},
        "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/r"}},
    }), tmp_path)
    assert one(objs, "ServiceAccount")["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/r"}
    cm = next(o for o in objs if o["kind"] == "ConfigMap" and "grafana_dashboard" in o["metadata"]["labels"])
    assert cm["metadata"]["annotations"]["grafana_folder"] == "Training"


# 3. Names of long releases.

LONG = ("training-run-imagenet-resnet50-baseline-2026-12-05-a1",
        "training-run-imagenet-resnet50-baseline-2026-12-05-a2")  # 53 characters, Helm's maximum


def test_two_long_releases_share_no_object_name(helm_bin: Path, tmp_path: Path) -> None:
    first, second = (names(render_release(helm_bin, tmp_path, r, {})) for r in LONG)
    assert first and not first & second, first & second
    assert ("Job", cut(f"{LONG[0]}-epochfs", 52)) in first
    assert within_limits(first | second)


WEBHOOK_LONG = ("shared-dataloader-imagenet-admission-webhook-a1",
                "shared-dataloader-imagenet-admission-webhook-a2")
WEBHOOK_VALUES = {"job": {"enabled": False}, "webhook": {"enabled": True}}


def test_two_long_webhook_releases_share_no_object_name(helm_bin: Path, tmp_path: Path) -> None:
    """The MutatingWebhookConfiguration is cluster-scoped: one name for both releases (even in
    two namespaces) made the second install fail on the first's, or take it over."""
    first, second = (names(render_release(helm_bin, tmp_path, r, WEBHOOK_VALUES)) for r in WEBHOOK_LONG)
    assert not first & second, first & second
    fullname = cut(f"{WEBHOOK_LONG[0]}-epochfs", 52)
    assert ("Deployment", f"{cut(fullname, 44)}-webhook") in first
    assert ("MutatingWebhookConfiguration", f"{cut(fullname, 44)}-webhook-ml") in first
    assert within_limits(first | second)
    other_ns = names(render_release(helm_bin, tmp_path, WEBHOOK_LONG[1], WEBHOOK_VALUES, namespace="ml2"))
    cluster = {n for n in first | other_ns if n[0] == "MutatingWebhookConfiguration"}
    assert len(cluster) == 2, cluster


@pytest.mark.parametrize("release", [RELEASE, "r" * 36, "r" * 44])
def test_names_that_fit_do_not_change(helm_bin: Path, tmp_path: Path, release: str) -> None:
    """An upgrade of an existing release keeps its objects: only names that had to be cut change.
    "r" * 44 gives the longest fullname that fits (52), "r" * 36 the longest webhook base (44)."""
    objs = names(render_release(helm_bin, tmp_path, release, {"webhook": {"enabled": True}}))
    assert ("Job", f"{release}-epochfs") in objs
    assert ("Pod", f"{release}-epochfs-test-readyz") in objs
    webhook = f"{release}-epochfs" if len(release) <= 36 else cut(f"{release}-epochfs", 44)
    assert ("Deployment", f"{webhook}-webhook") in objs


def test_a_long_fullname_override_is_cut_with_a_hash(helm_bin: Path, tmp_path: Path) -> None:
    override = "x" * 50 + "-one"
    objs = names(render_release(helm_bin, tmp_path, RELEASE, {"fullnameOverride": override}))
    assert ("Job", cut(override, 52)) in objs


# 7. Image tags and the waiting threshold.

@pytest.mark.parametrize("values", [
    {"image": {"tag": "-rc1"}},
    {"image": {"tag": "v1:latest"}},
    {"trainer": {"image": {"tag": "2.5.1 cuda"}}},
    {"trainer": {"image": {"tag": "a" * 129}}},
])
def test_the_schema_refuses_an_invalid_image_tag(helm_bin: Path, tmp_path: Path,
                                                 values: dict[str, Any]) -> None:
    err = refusal(helm_bin, tmp_path, values)
    assert "/image/tag'" in err and "does not match pattern" in err, err


def test_valid_image_tags_render(helm_bin: Path, tmp_path: Path) -> None:
    objs = render(helm_bin, with_remote({"image": {"tag": "0.1.0_rc.1-x"},
                                         "trainer": {"image": {"tag": "_" + "a" * 127}}}), tmp_path)
    images = {c["image"] for c in pod_spec(objs)["initContainers"] + pod_spec(objs)["containers"]}
    assert any(i.endswith(":0.1.0_rc.1-x") for i in images)
    assert any(i.endswith(":_" + "a" * 127) for i in images)


@pytest.mark.parametrize(("threshold", "percent"),
                         [("0.00001", "0.001%"), ("0.3", "30%"), ("0.123456", "12.3456%")])
def test_the_waiting_summary_keeps_the_thresholds_digits(
    helm_bin: Path, tmp_path: Path, threshold: str, percent: str
) -> None:
    """Rounded to 2 places, 0.00001 read "trainers wait ... more than 0%"."""
    proc = helm(helm_bin, "template", RELEASE, str(CHART), "--set", "remote.url=s3://b/p",
                "--set", "metrics.prometheusRule.enabled=true",
                "--set", f"metrics.prometheusRule.trainersWaitingThreshold={threshold}", tmp=tmp_path)
    rule = next(d for d in yaml.safe_load_all(proc.stdout) if d and d["kind"] == "PrometheusRule")
    [waiting] = [r for g in rule["spec"]["groups"] for r in g["rules"]
                 if r.get("alert") == "EpochfsTrainersWaitingForData"]
    assert waiting["annotations"]["summary"] == f"trainers wait for data more than {percent} of their time"
