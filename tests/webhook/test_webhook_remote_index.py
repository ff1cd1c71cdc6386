"""``epochfs.io/remote`` on a profile with ``remote.indexUrl``: the index lists the profile's
dataset, so a pod that names another remote gets a sidecar without it (which lists the pod's own
remote), not one that catalogs the other dataset's keys and finds none of them in its remote.
A pod that keeps the profile's remote (no annotation, or the same URL) keeps the index.

Served for real: the profiles the real helm renders, AdmissionReview v1 over HTTPS, the JSONPatch
applied, and the sidecar's settings read from the patched container by the sidecar's own parser.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from helm_helpers import render
from test_webhook_server import Served, serve, sidecar_settings
from webhook_helpers import PROFILES, chart_values, job, job_pod, profile_documents, write_profiles

from epochfs.sidecar.config import SidecarSettings

PROFILE_REMOTE = "s3://datasets/imagenet/train"
INDEX = "s3://datasets/indexes/imagenet-train.jsonl.gz"


@pytest.fixture(scope="module")
def served(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    values = chart_values()
    indexed = {"remote": {"url": PROFILE_REMOTE, "indexUrl": INDEX}}
    values["webhook"]["profiles"] = {**PROFILES, "indexed": indexed}
    docs = profile_documents(render(helm_bin, values, tmp_path_factory.mktemp("render")))
    profiles = write_profiles(docs, tmp_path_factory.mktemp("profiles"))
    yield from serve(profiles, tmp_path_factory.mktemp("tls"))


def _sidecar(served: Served, annotations: dict[str, str]) -> tuple[dict[str, Any], SidecarSettings]:
    pod = job_pod(job(annotations={"epochfs.io/profile": "indexed", **annotations}))
    response = served.client.review(pod)["response"]
    assert response["allowed"] is True, response
    patched = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    [sidecar] = [c for c in patched["spec"]["initContainers"] if c["name"] == "epochfs"]
    fields = {"metadata.name": "p", "metadata.namespace": "ml", "metadata.uid": "u", "spec.nodeName": "n"}
    return sidecar, sidecar_settings(sidecar, fields)


def test_another_remote_drops_the_profiles_index(served: Served) -> None:
    sidecar, settings = _sidecar(served, {"epochfs.io/remote": "s3://other-team/coco/train"})
    names = [e["name"] for e in sidecar["env"]]
    assert "EPOCHFS_INDEX" not in names, names
    assert settings.remote == "s3://other-team/coco/train" and settings.index_url is None


@pytest.mark.parametrize("annotations", [{}, {"epochfs.io/remote": PROFILE_REMOTE}], ids=["none", "same"])
def test_the_profiles_remote_keeps_its_index(served: Served, annotations: dict[str, str]) -> None:
    _, settings = _sidecar(served, annotations)
    assert settings.remote == PROFILE_REMOTE and settings.index_url == INDEX
