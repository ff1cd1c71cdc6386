"""The chart's ``imagePullSecrets`` reach the pods the webhook injects, as they reach its Job: the
sidecar's image may be in a private registry (deploy/kustomize/example uses one), and an injected
pod without the pull secret could not start (ImagePullBackOff). Names the pod lists already are
not repeated, and a profile may set its own list (``[]``: a public image).

Served for real: the profiles the real helm renders, AdmissionReview v1 over HTTPS, the JSONPatch
applied and the pod validated strictly (``mutate`` of test_webhook_server).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helm_helpers import render
from test_webhook_server import Served, mutate, serve
from webhook_helpers import PROFILES, chart_values, job, job_pod, profile_documents, write_profiles

PULL = [{"name": "regcred"}]


@pytest.fixture(scope="module")
def served(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    private = {"repository": "registry.example.com/ml/epochfs"}
    values = chart_values({"imagePullSecrets": PULL, "image": private})
    values["webhook"]["profiles"] = {**PROFILES, "public": {"imagePullSecrets": []}}
    objs = render(helm_bin, values, tmp_path_factory.mktemp("render"))
    [job_obj] = [o for o in objs if o["kind"] == "Job"]
    assert job_obj["spec"]["template"]["spec"]["imagePullSecrets"] == PULL  # what the Job gets
    profiles = write_profiles(profile_documents(objs), tmp_path_factory.mktemp("profiles"))
    yield from serve(profiles, tmp_path_factory.mktemp("tls"))


def _pod(pull: list[dict[str, str]] | None, profile: str = "default") -> dict[str, Any]:
    pod = job_pod(job(annotations={"epochfs.io/profile": profile}))
    if pull is not None:
        pod["spec"]["imagePullSecrets"] = pull
    return pod


@pytest.mark.parametrize(("own", "after"), [
    (None, PULL),
    ([{"name": "team-registry"}], [{"name": "team-registry"}, *PULL]),
    (PULL, PULL),
], ids=["none", "another", "the-same"])
def test_the_charts_pull_secrets_are_added_once(
    served: Served, own: list[dict[str, str]] | None, after: list[dict[str, str]]
) -> None:
    mutated, _ = mutate(served.client, _pod(own))
    assert mutated["spec"]["imagePullSecrets"] == after
    [sidecar] = mutated["spec"]["initContainers"]
    assert sidecar["image"].startswith("registry.example.com/ml/epochfs:")


def test_a_profile_with_no_pull_secrets_adds_none(served: Served) -> None:
    mutated, _ = mutate(served.client, _pod(None, profile="public"))
    assert "imagePullSecrets" not in mutated["spec"]
