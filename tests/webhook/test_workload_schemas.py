"""The workloads the webhook tests build (webhook_helpers: a PyTorchJob, a JobSet, a RayJob) are
objects their CRDs accept: their own fields against the CRD schemas (strict: those vendored for
the attach examples in examples/kubernetes/crd-schemas, and KubeRay's RayJob in
tests/webhook/crd-schemas), and every pod or Job template in them strictly against the Kubernetes
schema. The builders validate what they return; these tests show the checks run, and catch what
they should."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from helm_helpers import CRD_SCHEMAS, validate_custom_resource
from webhook_helpers import jobset, pytorchjob, rayjob, validate_workload

ANNOTATIONS = {"epochfs.io/profile": "multi", "epochfs.io/remote": "s3://other/data"}


@pytest.mark.parametrize("build", [pytorchjob, jobset, rayjob])
def test_the_workloads_own_fields_match_their_crds(build: Callable[..., dict[str, Any]]) -> None:
    for asked in (None, ANNOTATIONS):
        obj = build(annotations=asked)
        assert (obj["apiVersion"], obj["kind"]) in CRD_SCHEMAS
        validate_custom_resource(obj)
        validate_workload(obj)


@pytest.mark.parametrize(
    ("build", "break_it"),
    [
        (pytorchjob, lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"].update(replica=3)),
        (pytorchjob, lambda o: o["spec"].pop("pytorchReplicaSpecs")),
        (pytorchjob, lambda o: o["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas="3")),
        (jobset, lambda o: o["spec"]["network"].update(enableDNSHostname=True)),
        (jobset, lambda o: o["spec"]["replicatedJobs"][0].pop("name")),
        (jobset, lambda o: o["spec"]["replicatedJobs"][0].update(replicas="1")),
        (rayjob, lambda o: o["spec"].update(entryPoint="python tune.py")),
        (rayjob, lambda o: o["spec"]["rayClusterSpec"]["workerGroupSpecs"][0].update(replicas="2")),
        (rayjob, lambda o: o["spec"]["rayClusterSpec"].pop("headGroupSpec")),
    ],
)
def test_the_crd_check_catches_a_field_the_operator_refuses(
        build: Callable[..., dict[str, Any]], break_it: Callable[[dict[str, Any]], Any]) -> None:
    bad = copy.deepcopy(build())
    break_it(bad)
    with pytest.raises(jsonschema.ValidationError):
        validate_custom_resource(bad)
    with pytest.raises(jsonschema.ValidationError):
        validate_workload(bad)


def pod_spec_of(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod spec (itself, not a copy) of the template that asks for epochfs."""
    spec = obj["spec"]
    if obj["kind"] == "PyTorchJob":
        out = spec["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    elif obj["kind"] == "JobSet":
        out = spec["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    else:
        out = spec["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert isinstance(out, dict)
    return out


@pytest.mark.parametrize("build", [pytorchjob, jobset, rayjob])
def test_the_pod_templates_are_checked_as_pods(build: Callable[..., dict[str, Any]]) -> None:
    """A field no Pod has, in a pod template the CRD schemas leave open, is refused."""
    validate_workload(build(annotations=ANNOTATIONS))
    bad = copy.deepcopy(build())
    pod_spec_of(bad)["containers"][0]["imagePullPolice"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_workload(bad)


def test_a_jobsets_job_template_is_checked_as_a_job() -> None:
    bad = copy.deepcopy(jobset())
    bad["spec"]["replicatedJobs"][0]["template"]["spec"]["completion"] = 4
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_workload(bad)


def test_the_rayjob_schema_is_kuberays_v1_cut_like_the_others() -> None:
    """The vendored RayJob schema: KubeRay's v1 with its pod templates left to kubernetes-validate."""
    schema = json.loads(CRD_SCHEMAS[("ray.io/v1", "RayJob")].read_text())
    assert "ray-project/kuberay" in schema["$comment"] and "status" not in schema["properties"]
    cluster = schema["properties"]["spec"]["properties"]["rayClusterSpec"]["properties"]
    assert cluster["headGroupSpec"]["properties"]["template"] == {"type": "object"}
    assert cluster["workerGroupSpecs"]["items"]["properties"]["template"] == {"type": "object"}
    assert "entrypoint" in schema["properties"]["spec"]["properties"]
