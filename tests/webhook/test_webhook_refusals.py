"""Pods the webhook must refuse at admission, with the reason, instead of patching them into pods
that fail at runtime: a remote URL that is malformed, a trainer mount nested with epochfs's, a
pod on the node's network (the sidecar's port opened on the node). Served for real: the
profiles the real helm renders, AdmissionReview v1 over HTTPS to `epochfs webhook`'s server."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from helm_helpers import render
from test_webhook_server import Served, refused, serve
from webhook_helpers import chart_values, job, job_pod, profile_documents, write_profiles


@pytest.fixture(scope="module")
def served(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    docs = profile_documents(render(helm_bin, chart_values(), tmp_path_factory.mktemp("render")))
    profiles = write_profiles(docs, tmp_path_factory.mktemp("profiles"))
    yield from serve(profiles, tmp_path_factory.mktemp("tls"))


def admitted(served: Served, pod: dict[str, Any]) -> dict[str, Any]:
    response = served.client.review(pod)["response"]
    assert response["allowed"] is True, response
    return jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))


BAD_REMOTES = [
    # What the sidecar's own start-up check (registry.check_url) refuses.
    ("s3://", "no bucket (s3://bucket/prefix)"),
    ("s3:///train", "no bucket (s3://bucket/prefix)"),
    ("s3://my bucket/train", "'my bucket' is not an S3 bucket name"),
    ("gs:///train", "no bucket (gs://bucket/prefix)"),
    ("az://@account.blob.core.windows.net/train", "no container (az://container/prefix)"),
    ("https://", "no host (https://host/path)"),
    ("https:///index", "no host (https://host/path)"),
    ("http://[::1/data", "Invalid IPv6 URL"),
    ("file://", "no folder"),
    # What passes it but no sidecar in a pod can list.
    ("gs://my bucket/train", "'my bucket' is not a bucket or container name"),
    # The bucket ends at the first "/" alone: "#" and "?" before it are in the name, not a fragment.
    ("gs://b#1/train", "'b#1' is not a bucket or container name"),
    ("https://host:http/data", "Port could not be cast"),
    ("https://host:99999/data", "Port out of range"),
    ("file://data/train", "needs an absolute path"),
    ("s3://bucket/tr\x00ain", "control character"),
]


@pytest.mark.parametrize(("url", "message"), BAD_REMOTES, ids=[u for u, _ in BAD_REMOTES])
def test_a_malformed_remote_is_refused_with_the_reason(served: Served, url: str, message: str) -> None:
    pod = job_pod(job(annotations={"epochfs.io/remote": url}))
    text = refused(served.client, pod)
    assert text.startswith("epochfs: epochfs.io/remote: ") and message in text, text


@pytest.mark.parametrize("url", ["s3://bucket", "s3://b/run#1?x", "gs://b_1/p", "gs://b_1/run#1?x",
                                 "https://h:8443/d", "az://c@acct.blob.core.windows.net/p"])
def test_a_well_formed_remote_is_injected(served: Served, url: str) -> None:
    pod = admitted(served, job_pod(job(annotations={"epochfs.io/remote": url})))
    [side] = pod["spec"]["initContainers"]
    assert {"name": "EPOCHFS_REMOTE", "value": url} in side["env"]


DATASET_VOLUME = {"extraVolumes": [{"name": "dataset", "persistentVolumeClaim": {"claimName": "imagenet"}}],
                  "extraVolumeMounts": [{"name": "dataset", "mountPath": "/data", "readOnly": True}]}


@pytest.fixture(scope="module")
def served_with_data(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Profiles whose sidecar mounts a dataset volume at /data (sidecar.extraVolumeMounts)."""
    values = chart_values({"sidecar": DATASET_VOLUME, "remote": {"url": "file:///data/train"}})
    docs = profile_documents(render(helm_bin, values, tmp_path_factory.mktemp("render")))
    profiles = write_profiles(docs, tmp_path_factory.mktemp("profiles"))
    yield from serve(profiles, tmp_path_factory.mktemp("tls"))


@pytest.mark.parametrize("url", ["file:///data/train", "file://localhost/data", "file:///data"])
def test_a_file_remote_the_sidecar_mounts_is_injected(served_with_data: Served, url: str) -> None:
    pod = admitted(served_with_data, job_pod(job(annotations={"epochfs.io/remote": url})))
    [side] = pod["spec"]["initContainers"]
    assert {"name": "EPOCHFS_REMOTE", "value": url} in side["env"]


@pytest.mark.parametrize(("url", "folder"), [("file:///datasets/imagenet", "/datasets/imagenet"),
                                             ("file:///database", "/database")])
def test_a_file_remote_no_sidecar_mount_holds_is_refused(served_with_data: Served, url: str,
                                                         folder: str) -> None:
    """The chart refuses such a remote.url at render; an annotation reached the sidecar and its
    pod crash-looped (review R53b). /database is not under /data: a path, not a prefix."""
    text = refused(served_with_data.client, job_pod(job(annotations={"epochfs.io/remote": url})))
    assert f"the sidecar reads {folder} in its own container" in text, text
    assert "sidecar.extraVolumeMounts" in text, text


NESTED = [
    ("/mnt/epochfs", "at /mnt/epochfs"),
    ("/mnt/epochfs/view/extra", "under /mnt/epochfs"),
    ("/mnt/./epochfs/view", "under /mnt/epochfs"),
    ("/mnt", "above /mnt/epochfs"),
    ("/var//cache/", "above /var/cache/epochfs-ro"),
    ("/var/cache/epochfs-ro/x", "under /var/cache/epochfs-ro"),
]


@pytest.mark.parametrize(("path", "message"), NESTED, ids=[p for p, _ in NESTED])
def test_a_trainer_mount_nested_with_epochfs_is_refused(served: Served, path: str, message: str) -> None:
    pod = job_pod(job())
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": path}]
    pod["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    text = refused(served.client, pod)
    assert f"mounts something at {path}, {message}" in text, text


def test_mounts_beside_epochfs_and_in_other_containers_are_left_alone(served: Served) -> None:
    """/mnt/epochfs-data shares a prefix, not a folder; a container epochfs.io/containers leaves
    out gets no epochfs mount, so its own mount there nests with nothing."""
    pod = job_pod(job(annotations={"epochfs.io/containers": "trainer"}))
    trainer = pod["spec"]["containers"][0]
    trainer["volumeMounts"] = [{"name": "data", "mountPath": "/mnt/epochfs-data"}]
    pod["spec"]["containers"].append({"name": "logger", "image": "busybox",
                                      "volumeMounts": [{"name": "data", "mountPath": "/mnt"}]})
    pod["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    mutated = admitted(served, pod)
    assert [m["mountPath"] for m in mutated["spec"]["containers"][1]["volumeMounts"]] == ["/mnt"]


def test_a_pod_on_the_nodes_network_is_refused_naming_the_port(served: Served) -> None:
    pod = job_pod(job())
    pod["spec"]["hostNetwork"] = True
    text = refused(served.client, pod)
    assert "hostNetwork: true" in text and "port 8080" in text and "on the node" in text, text
    pod["spec"]["hostNetwork"] = False
    admitted(served, pod)


def test_a_pod_on_the_nodes_network_is_admitted_with_a_profile_of_its_own_port(served: Served) -> None:
    """NCCL jobs on the host network: a profile whose sidecar.healthPort is a port the platform
    keeps for epochfs (here "ray"'s 8090) admits them."""
    pod = job_pod(job(annotations={"epochfs.io/profile": "ray"}))
    pod["spec"]["hostNetwork"] = True
    mutated = admitted(served, pod)
    spec = mutated["spec"]
    ports = [p["containerPort"] for c in spec.get("initContainers", []) + spec["containers"]
             for p in c.get("ports", [])]
    assert 8090 in ports and 8080 not in ports, ports
