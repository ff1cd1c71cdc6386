"""A pod already attached through the chart's templates (the example parent chart's Pod) that also
asks for injection is left alone, as the docs promise, whichever optional volumes its values and
the profile's differ in: the API token's (``kubeReporting.enabled``) and the credentials'
(``remote.credentials`` in files mode). "Attached" is the sidecar and the volumes it shares with the
trainer (the view's and the cache's). A pod with a container named like the sidecar and none of
those volumes is still refused.

Served for real: the profiles and the example chart's Pod rendered by the real helm, AdmissionReview
v1 over HTTPS.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helm_helpers import render, render_pod_snippet
from test_webhook_server import Served, refused, serve
from webhook_helpers import PROFILES, chart_values, job, job_pod, profile_documents, write_profiles

FILES = {"secretName": "s3-creds", "mode": "files", "fileEnv": {"AWS_SHARED_CREDENTIALS_FILE": "credentials"}}


@pytest.fixture(scope="module")
def served(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    values = chart_values()
    values["webhook"]["profiles"] = {**PROFILES, "creds": {"remote": {"credentials": FILES}}}
    docs = profile_documents(render(helm_bin, values, tmp_path_factory.mktemp("render")))
    profiles = write_profiles(docs, tmp_path_factory.mktemp("profiles"))
    yield from serve(profiles, tmp_path_factory.mktemp("tls"))


def _asking(pod: dict[str, Any], profile: str) -> dict[str, Any]:
    pod["metadata"].setdefault("annotations", {}).update(
        {"epochfs.io/inject": "true", "epochfs.io/profile": profile})
    return pod


@pytest.mark.parametrize(("values", "profile"), [
    ({}, "default"),
    ({"kubeReporting": {"enabled": False}}, "default"),
    ({"remote": {"credentials": FILES}}, "default"),
    ({}, "creds"),
], ids=["same-values", "no-kube-reporting", "credentials-in-pod", "credentials-in-profile"])
def test_a_pod_attached_by_the_templates_is_left_alone(
    served: Served, helm_bin: Path, tmp_path: Path, values: dict[str, Any], profile: str
) -> None:
    pod = _asking(render_pod_snippet(helm_bin, values, tmp_path), profile)
    response = served.client.review(pod)["response"]
    assert response["allowed"] is True, response
    assert "patch" not in response and "patchType" not in response


def test_a_container_named_like_the_sidecar_without_its_volumes_is_refused(served: Served) -> None:
    pod = job_pod(job())
    pod["spec"]["containers"].append({"name": "epochfs", "image": "busybox"})
    assert "already has a container named 'epochfs'" in refused(served.client, pod)
