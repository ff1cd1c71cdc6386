"""What a pod asks of the webhook is read, or refused, never ignored; what injection changes in the
pod beyond epochfs's parts is said.

Before: a misspelled ``epochfs.io/*`` key (``epochfs.io/remote-url``) or an option given as a label
(``epochfs.io/profile: folder``) was ignored, and the pod trained on the profile's dataset; a
capacity without a unit (``100``, ``15``) was admitted as bytes and its sidecar stopped at start;
the profile's ``prometheus.io/*`` annotations were merged key by key into a pod that had its own,
pointing its discovery at the sidecar's port with its own path; a Guaranteed pod became Burstable
without a word. Served for real: the profiles the real helm renders (one with a Guaranteed
sidecar), AdmissionReview v1 over HTTPS to `epochfs webhook`'s server; each patch applied and the
pod validated strictly.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
from helm_helpers import render
from test_webhook_server import Served, refused, serve
from webhook_helpers import PROFILES, chart_values, job, job_pod, profile_documents, write_profiles

from epochfs.sidecar.webhook.fields import ANNOTATIONS
from epochfs.sidecar.webhook.mutate import SCRAPE_WARNING
from epochfs.sidecar.webhook.qos import qos_warning, quantity

GUARANTEED_SIDECAR = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"cpu": "1000m", "memory": "2Gi"}}


@pytest.fixture(scope="module")
def served(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    values = chart_values()
    profiles = {**PROFILES, "guaranteed": {"sidecar": {"resources": GUARANTEED_SIDECAR}}}
    values["webhook"] = {**values["webhook"], "profiles": profiles}
    docs = profile_documents(render(helm_bin, values, tmp_path_factory.mktemp("render")))
    yield from serve(
        write_profiles(docs, tmp_path_factory.mktemp("profiles")), tmp_path_factory.mktemp("tls")
    )


def admitted(served: Served, pod: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(the mutated pod, validated strictly; the response's warnings)."""
    response = served.client.review(pod)["response"]
    assert response["allowed"] is True, response
    mutated = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    kubernetes_validate.validate(mutated, kubernetes_validate.latest_version(), strict=True)
    return mutated, response.get("warnings", [])


def sidecar_env(pod: dict[str, Any]) -> dict[str, Any]:
    [side] = [c for c in pod["spec"]["initContainers"] if c["name"] == "epochfs"]
    return {e["name"]: e.get("value") for e in side["env"]}


# --------------------------------------------------------------------------- keys


TYPOS = [
    "epochfs.io/remote-url",
    "epochfs.io/Remote",
    "epochfs.io/remotes",
    "epochfs.io/dataset",
    "epochfs.io/profle",
    "epochfs.io/shard_index",
    "epochfs.io/container",
]


@pytest.mark.parametrize("key", TYPOS)
def test_an_epochfs_key_it_does_not_read_is_refused_with_the_known_ones(served: Served, key: str) -> None:
    message = refused(served.client, job_pod(job(annotations={key: "s3://datasets/other/train"})))
    assert message.startswith(f"epochfs: {key} is not an annotation epochfs reads"), message
    assert ", ".join(ANNOTATIONS) in message, message


def test_a_near_miss_is_named(served: Served) -> None:
    message = refused(served.client, job_pod(job(annotations={"epochfs.io/remote-url": "s3://b/p"})))
    assert "did you mean epochfs.io/remote?" in message, message


def test_the_keys_epochfs_writes_itself_are_admitted(served: Served) -> None:
    """The sidecar's status annotation, on a pod copied from a running one."""
    mutated, _ = admitted(served, job_pod(job(annotations={"epochfs.io/status": "{}"})))
    assert mutated["metadata"]["annotations"]["epochfs.io/injected"] == "default"


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("epochfs.io/profile", "folder"),
        ("epochfs.io/remote", "s3-other"),
        ("epochfs.io/capacity", "5Gi"),
        ("epochfs.io/shard-index", "0"),
        ("epochfs.io/containers", "trainer"),
    ],
)
def test_an_option_given_as_a_label_is_refused(served: Served, key: str, value: str) -> None:
    pod = job_pod(job())
    pod["metadata"]["labels"][key] = value
    message = refused(served.client, pod)
    assert (
        message.startswith(f"epochfs: {key} is a label of this pod") and "set it as an annotation" in message
    )


def test_inject_works_as_a_label_and_the_options_as_annotations(served: Served) -> None:
    pod = job_pod(job(annotations={"epochfs.io/profile": "folder", "epochfs.io/remote": "s3://b/other"}))
    assert pod["metadata"]["labels"]["epochfs.io/inject"] == "true"
    mutated, _ = admitted(served, pod)
    assert mutated["metadata"]["annotations"]["epochfs.io/injected"] == "folder"
    assert sidecar_env(mutated)["EPOCHFS_REMOTE"] == "s3://b/other"


# --------------------------------------------------------------------------- capacity


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("100", "has no unit"),
        ("15", "has no unit"),
        (" 15 ", "has no unit"),
        ("1.5", "has no unit"),
        ("4096", "has no unit"),
        ("100B", "less than the 1Mi"),
        ("512Ki", "less than the 1Mi"),
        ("0.5Mi", "less than the 1Mi"),
    ],
)
def test_a_capacity_without_a_unit_or_below_a_mebibyte_is_refused(
    served: Served, value: str, message: str
) -> None:
    text = refused(served.client, job_pod(job(annotations={"epochfs.io/capacity": value})))
    assert text.startswith("epochfs: epochfs.io/capacity: ") and message in text, text
    assert "15Gi" in text and "500G" in text, text


@pytest.mark.parametrize(
    ("value", "size"), [("1Mi", 2**20), ("15Gi", 15 * 2**30), ("15G", 15 * 10**9), ("2000000B", 2_000_000)]
)
def test_a_capacity_with_its_unit_is_admitted(served: Served, value: str, size: int) -> None:
    mutated, _ = admitted(served, job_pod(job(annotations={"epochfs.io/capacity": value})))
    assert sidecar_env(mutated)["EPOCHFS_CAPACITY"] == str(size)


# --------------------------------------------------------------------------- scrape annotations


@pytest.mark.parametrize(
    "own",
    [
        {"prometheus.io/scrape": "true", "prometheus.io/path": "/stats"},
        {"prometheus.io/scrape": "true"},
        {"prometheus.io/port": "9100"},
    ],
)
def test_a_pod_with_scrape_annotations_of_its_own_gets_none_of_epochfs(
    served: Served, own: dict[str, str]
) -> None:
    pod = job_pod(job(annotations=own))
    mutated, warnings = admitted(served, pod)
    scrape = {k: v for k, v in mutated["metadata"]["annotations"].items() if k.startswith("prometheus.io/")}
    assert scrape == own
    assert warnings == [SCRAPE_WARNING]
    assert mutated["metadata"]["labels"]["epochfs.io/injected-by"]  # the PodMonitor's selector


def test_a_pod_without_scrape_annotations_gets_epochfs(served: Served) -> None:
    mutated, warnings = admitted(served, job_pod(job()))
    assert mutated["metadata"]["annotations"]["prometheus.io/port"] == "8080"
    assert warnings == []


# --------------------------------------------------------------------------- QoS


def qos_class(pod: dict[str, Any]) -> str:
    """Kubernetes' QoS class of a pod (pkg/apis/core/helper/qos): init containers count; a
    request left out is its limit."""
    guaranteed, any_set = True, False
    spec = pod["spec"]
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        res = c.get("resources", {})
        limits, requests = res.get("limits", {}), res.get("requests", {})
        for name in ("cpu", "memory"):
            any_set = any_set or name in limits or name in requests
            limit = quantity(limits[name]) if name in limits else None
            request = quantity(requests[name]) if name in requests else limit
            guaranteed = guaranteed and limit is not None and request == limit
    return "Guaranteed" if guaranteed else "Burstable" if any_set else "BestEffort"


def guaranteed_pod(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    pod = job_pod(job(annotations=annotations))
    pod["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": "8"},
        "limits": {"cpu": "16000m", "memory": str(128 * 2**30), "nvidia.com/gpu": "8"},
    }
    assert qos_class(pod) == "Guaranteed"
    return pod


@pytest.mark.parametrize("profile", ["default", "folder"])
def test_a_guaranteed_pod_made_burstable_is_warned(served: Served, profile: str) -> None:
    pod = guaranteed_pod({"epochfs.io/profile": profile})
    mutated, warnings = admitted(served, copy.deepcopy(pod))
    assert qos_class(mutated) == "Burstable"  # the sidecar's resources are left as the profile has them
    [warning] = warnings
    assert "Guaranteed" in warning and "Burstable" in warning and "sidecar.resources" in warning
    assert f"profile {profile}" in warning and len(warning) <= 256


def test_a_guaranteed_sidecar_keeps_the_pod_guaranteed_without_a_warning(served: Served) -> None:
    mutated, warnings = admitted(served, guaranteed_pod({"epochfs.io/profile": "guaranteed"}))
    assert qos_class(mutated) == "Guaranteed" and warnings == []


def test_a_burstable_pod_gets_no_warning(served: Served) -> None:
    pod = job_pod(job())
    pod["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1"},
        "limits": {"cpu": "2", "memory": "1Gi"},
    }
    assert admitted(served, pod)[1] == []


def test_the_warning_fits_the_api_servers_limit_for_any_profile_name() -> None:
    own = {"containers": [{"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}
    warning = qos_warning(own, [{"resources": {"requests": {"cpu": "1"}}}], "p" * 63)
    assert warning is not None and len(warning) <= 256
    assert qos_warning({**own, "resources": {"limits": {"cpu": "2"}}}, [{}], "p") is None  # pod-level
    assert len(SCRAPE_WARNING) <= 256
