"""The admission webhook served for real (issue 23): `epochfs webhook`'s HTTPS server with a
certificate made here (cryptography), the profiles the real helm renders from the chart, and
AdmissionReview v1 requests for the pods the controllers of a Job, a PyTorchJob, a JobSet and a
RayJob create. Each JSONPatch is applied (jsonpatch) and the pod validated strictly
(kubernetes-validate, 1.29 and the newest); a second pass over the mutated pod changes nothing;
the refusals say why; the injected parts equal the chart's own Job's, field for field."""

from __future__ import annotations

import asyncio
import base64
import copy
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
from common import wait_until
from helm_helpers import container, env_of, mounts_of, pod_spec, render, with_remote
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from pss import violations
from webhook_helpers import (
    SERVICE_DNS,
    Client,
    admission_review,
    chart_values,
    job,
    job_pod,
    jobset,
    jobset_pod,
    make_ca,
    make_leaf,
    pem,
    profile_documents,
    pytorchjob,
    pytorchjob_worker_pod,
    rayjob,
    rayjob_worker_pod,
    webhook_cmd,
    write_profiles,
)

from epochfs.sidecar import config
from epochfs.sidecar.metrics import WebhookMetrics
from epochfs.sidecar.webhook.profiles import Profile
from epochfs.sidecar.webhook.server import AdmissionServer, MetricsServer, TLSFiles

K8S_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def docs(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return profile_documents(render(helm_bin, chart_values(), tmp_path_factory.mktemp("render")))


@pytest.fixture(scope="module")
def profiles(docs: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Profile]:
    return write_profiles(docs, tmp_path_factory.mktemp("profiles"))


class Served:
    def __init__(self, server: AdmissionServer, metrics_server: MetricsServer, client: Client) -> None:
        self.server, self.metrics_server, self.client = server, metrics_server, client

    def counts(self) -> dict[str, float]:
        conn = http.client.HTTPConnection("127.0.0.1", self.metrics_server.server_address[1], timeout=10)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
        out = {}
        for family in text_string_to_metric_families(text):
            if family.name == "epochfs_webhook_requests":
                for s in family.samples:
                    if s.name.endswith("_total"):
                        out[s.labels["result"]] = s.value
        return out


def serve(profiles: dict[str, Profile], folder: Path, ca: Any = None, **options: Any) -> Iterator[Served]:
    """The server on a free port in threads of its own; ``options`` go to :class:`AdmissionServer`."""
    ca = ca or make_ca()
    cert, key, _ = make_leaf(ca, [SERVICE_DNS])
    (folder / "tls.crt").write_bytes(cert)
    (folder / "tls.key").write_bytes(key)
    metrics = WebhookMetrics()
    server = AdmissionServer(
        ("127.0.0.1", 0),
        profiles,
        TLSFiles(folder / "tls.crt", folder / "tls.key"),
        metrics,
        max_body=1 << 20,
        **options,
    )
    metrics_server = MetricsServer(("127.0.0.1", 0), metrics.registry)
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in (server, metrics_server)]
    for t in threads:
        t.start()
    try:
        yield Served(server, metrics_server, Client(server.server_address[1], pem(ca[1])))
    finally:
        for s in (server, metrics_server):
            s.shutdown()
            s.server_close()


@pytest.fixture(scope="module")
def served(profiles: dict[str, Profile], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    yield from serve(profiles, tmp_path_factory.mktemp("tls"))


def validate(pod: dict[str, Any]) -> None:
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(pod, version, strict=True)


def mutate(
    client: Client, pod: dict[str, Any], path: str = "/mutate"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the mutated pod, the response); the request's pod is valid to begin with."""
    validate(pod)
    answer = client.review(pod, path=path)
    response = answer["response"]
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert response["allowed"] is True, response
    assert response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    assert {op["op"] for op in patch} == {"add"}
    mutated = jsonpatch.apply_patch(pod, patch)
    validate(mutated)
    # Idempotent: the mutated pod, sent again, gets no patch.
    again = client.review(mutated, path=path)["response"]
    assert again["allowed"] is True and "patch" not in again and "patchType" not in again
    return mutated, response


def refused(client: Client, pod: dict[str, Any], path: str = "/mutate") -> str:
    response = client.review(pod, path=path)["response"]
    assert response["allowed"] is False, response
    assert "patch" not in response and response["status"]["code"] == 403
    message: str = response["status"]["message"]
    assert message.startswith("epochfs: ")
    return message


def sidecar_settings(c: dict[str, Any], fields: dict[str, str]) -> config.SidecarSettings:
    env = {}
    for e in c["env"]:
        env[e["name"]] = e["value"] if "value" in e else fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
    return config.parse(config.SidecarSettings, [], environ=env)


def field_values(pod: dict[str, Any]) -> dict[str, str]:
    """What the downward API gives this pod's fieldRefs."""
    meta = pod["metadata"]
    out = {
        "metadata.name": meta.get("name", "x"),
        "metadata.namespace": "training",
        "metadata.uid": "u",
        "spec.nodeName": "node-1",
    }
    for where in ("labels", "annotations"):
        for k, v in meta.get(where, {}).items():
            out[f"metadata.{where}['{k}']"] = v
    return out


def injected(chart_sidecar: dict[str, Any]) -> dict[str, Any]:
    """The chart's sidecar as the webhook injects it: its port, and the probes' reference to it,
    named epochfs-metrics instead of metrics (tests/webhook/test_injected_port_name.py says why)."""
    side = copy.deepcopy(chart_sidecar)
    [port] = side["ports"]
    assert port["name"] == "metrics"
    port["name"] = "epochfs-metrics"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert side[probe]["httpGet"]["port"] == "metrics"
        side[probe]["httpGet"]["port"] = "epochfs-metrics"
    return side


# --------------------------------------------------------------------------- the workloads


def test_a_job_pod_gets_the_charts_own_attachment(served: Served, helm_bin: Path, tmp_path: Path) -> None:
    """A plain Job's pod with the one label: the sidecar, volumes, trainer mounts and environment are
    the chart's Job's, field for field (one source: the named templates)."""
    pod = job_pod(job())
    mutated, _ = mutate(served.client, pod)
    spec = mutated["spec"]
    chart = pod_spec(render(helm_bin, with_remote({}), tmp_path))
    assert [c["name"] for c in spec["initContainers"]] == ["epochfs"]
    assert container(spec, "epochfs") == injected(container(chart, "epochfs"))
    assert spec["volumes"] == [v for v in chart["volumes"] if v["name"] != "dshm"]
    trainer, chart_trainer = container(spec, "trainer"), container(chart, "trainer")
    assert trainer["env"][:4] == chart_trainer["env"][:4]
    # The trainer's own variable follows epochfs' (it refers to $(EPOCHFS_MOUNT)).
    assert trainer["env"][4] == {"name": "DATA", "value": "$(EPOCHFS_MOUNT)/latest"}
    assert trainer["volumeMounts"] == chart_trainer["volumeMounts"][:2]
    for key, value in chart["securityContext"].items():
        assert spec["securityContext"][key] == value
    ann = mutated["metadata"]["annotations"]
    assert ann["epochfs.io/injected"] == "default"
    assert {k: ann[k] for k in ("prometheus.io/scrape", "prometheus.io/port")} == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8080",
    }
    settings = sidecar_settings(container(spec, "epochfs"), field_values(mutated))
    assert (settings.remote, settings.shard_index, settings.shard_count) == (
        "s3://datasets/imagenet/train",
        0,
        1,
    )


def test_an_indexed_job_pod_samples_its_completion_index(served: Served) -> None:
    obj = job(index=0, annotations={"epochfs.io/profile": "multi"})
    shards = set()
    for index in range(4):
        mutated, _ = mutate(served.client, job_pod(obj, index))
        spec = mutated["spec"]
        side, trainer = container(spec, "epochfs"), container(spec, "trainer")
        assert (
            env_of(side)["EPOCHFS_SHARD_INDEX"]
            == env_of(trainer)["EPOCHFS_SHARD_INDEX"]
            == {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
        )
        settings = sidecar_settings(side, field_values(mutated))
        assert settings.shard_count == 4
        shards.add(settings.shard_index)
    assert shards == {0, 1, 2, 3}


def test_a_pytorchjob_worker_takes_its_shard_from_the_replica_index(served: Served) -> None:
    obj = pytorchjob(
        {
            "epochfs.io/profile": "multi",
            "epochfs.io/shard-index": "metadata.labels['training.kubeflow.org/replica-index']",
        }
    )
    shards = set()
    for index in range(3):
        pod = pytorchjob_worker_pod(obj, index)
        mutated, _ = mutate(served.client, pod)
        spec = mutated["spec"]
        pytorch = container(spec, "pytorch")
        # epochfs' environment first, then the operator's, unchanged.
        assert [e["name"] for e in pytorch["env"]][:4] == [
            "EPOCHFS_MOUNT",
            "EPOCHFS_CACHE",
            "EPOCHFS_REPORT_URL",
            "EPOCHFS_SHARD_INDEX",
        ]
        assert pytorch["env"][4:] == pod["spec"]["containers"][0]["env"]
        assert pytorch["ports"] == pod["spec"]["containers"][0]["ports"]
        shards.add(sidecar_settings(container(spec, "epochfs"), field_values(mutated)).shard_index)
    assert shards == {0, 1, 2}  # the Master takes 3 with epochfs.io/shard-index: "3"
    master = pytorchjob_worker_pod(
        pytorchjob({"epochfs.io/profile": "multi", "epochfs.io/shard-index": "3"}), 0
    )
    mutated, _ = mutate(served.client, master)
    assert sidecar_settings(container(mutated["spec"], "epochfs"), field_values(mutated)).shard_index == 3


def test_a_jobset_pod_in_a_restricted_namespace_gets_the_folder_view(served: Served) -> None:
    """The folder view's sidecar has no privilege: a namespace that enforces Restricted admits it
    (the webhook is called on /mutate/pss-enforced there), and the mutated pod passes Restricted."""
    obj = jobset({"epochfs.io/profile": "folder"})
    pod = jobset_pod(obj, 2)
    mutated, _ = mutate(served.client, pod, path="/mutate/pss-enforced")
    spec = mutated["spec"]
    side = container(spec, "epochfs")
    assert env_of(side)["EPOCHFS_VIEW"] == "folder"
    assert side["securityContext"]["privileged"] is False and side["securityContext"]["runAsNonRoot"] is True
    assert "mountPropagation" not in mounts_of(container(spec, "trainer"))["/mnt/epochfs"]
    assert violations(spec, mutated["metadata"]) == []
    assert mutated["metadata"]["annotations"]["epochfs.io/injected"] == "folder"


def test_a_rayjob_worker_with_overrides_and_its_own_init_container(served: Served) -> None:
    """KubeRay's worker declares port 8080: the default profile's sidecar port. A profile with
    another port serves it; remote and capacity come from the annotations; only ray-worker is a
    trainer; the sidecar starts before KubeRay's wait-gcs-ready."""
    annotations = {
        "epochfs.io/remote": "s3://other-bucket/ray",
        "epochfs.io/capacity": "5Gi",
        "epochfs.io/containers": "ray-worker",
    }
    message = refused(served.client, rayjob_worker_pod(rayjob(annotations)))
    assert "declares port 8080" in message and "ray-worker" in message
    pod = rayjob_worker_pod(rayjob({**annotations, "epochfs.io/profile": "ray"}))
    mutated, _ = mutate(served.client, pod)
    spec = mutated["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["epochfs", "wait-gcs-ready"]
    assert spec["volumes"][0]["name"] == "ray-logs"
    assert mounts_of(container(spec, "ray-worker"))["/tmp/ray"] == {
        "name": "ray-logs",
        "mountPath": "/tmp/ray",
    }
    settings = sidecar_settings(container(spec, "epochfs"), field_values(mutated))
    assert settings.remote == "s3://other-bucket/ray"
    assert settings.capacity == 5 * 1024**3
    assert settings.health_port == 8090
    assert "EPOCHFS_MOUNT" not in env_of(container(spec, "wait-gcs-ready"))


def test_profiles_merge_false_and_replace_what_they_set(
    served: Served, helm_bin: Path, tmp_path: Path
) -> None:
    """The quiet profile (kubeReporting and metrics off) and the hostPath profile inject what the
    chart's Job renders with those values: a profile is the chart's values with its own merged in."""
    for name, values in (
        ("quiet", {"kubeReporting": {"enabled": False}, "metrics": {"enabled": False}}),
        ("hostpath", {"cache": {"volume": {"type": "hostPath"}}, "nodes": 2}),
    ):
        obj = job(index=0 if name == "hostpath" else None, annotations={"epochfs.io/profile": name})
        pod = job_pod(obj, 1 if name == "hostpath" else None)
        mutated, _ = mutate(served.client, pod)
        chart = pod_spec(render(helm_bin, with_remote(values), tmp_path))
        spec = mutated["spec"]
        assert container(spec, "epochfs") == injected(container(chart, "epochfs"))
        assert spec["volumes"] == [v for v in chart["volumes"] if v["name"] != "dshm"]
        assert container(spec, "trainer")["volumeMounts"] == container(chart, "trainer")["volumeMounts"][:2]
        if name == "quiet":
            assert "epochfs-kube-api-access" not in {v["name"] for v in spec["volumes"]}
            assert set(mutated["metadata"]["annotations"]) == {"epochfs.io/injected", "epochfs.io/profile"}


# --------------------------------------------------------------------------- idempotence and skips


def test_pods_that_did_not_ask_or_are_attached_already_are_left_alone(
    served: Served, helm_bin: Path, tmp_path: Path
) -> None:
    def untouched(pod: dict[str, Any], **kw: Any) -> None:
        response = served.client.review(pod, **kw)["response"]
        assert response["allowed"] is True and "patch" not in response, response

    plain = job_pod(job())
    del plain["metadata"]["labels"]["epochfs.io/inject"]
    untouched(plain)
    declined = job_pod(job(annotations={"epochfs.io/inject": "false"}))  # the annotation wins
    untouched(declined)
    untouched(job_pod(job()), operation="UPDATE")
    untouched(
        {"metadata": {"name": "d"}, "spec": {}}, kind={"group": "apps", "version": "v1", "kind": "Deployment"}
    )
    # A pod a parent chart attached with the named templates (and labelled too).
    chart_pod = pod_spec(render(helm_bin, with_remote({}), tmp_path))
    untouched(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p", "namespace": "training", "labels": {"epochfs.io/inject": "true"}},
            "spec": chart_pod,
        }
    )


def test_an_annotation_alone_asks_too(served: Served) -> None:
    """For clusters that send whole namespaces (objectSelector {}): the annotation opts in."""
    pod = job_pod(job(annotations={"epochfs.io/inject": "true"}))
    del pod["metadata"]["labels"]["epochfs.io/inject"]
    mutated, _ = mutate(served.client, pod)
    assert container(mutated["spec"], "epochfs")


def test_pods_without_metadata_maps_or_lists_get_them(served: Served) -> None:
    """A pod with no annotations, init containers, volumes, env or mounts: each is added whole."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bare", "namespace": "training", "labels": {"epochfs.io/inject": "true"}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }
    mutated, response = mutate(served.client, pod)
    ops = json.loads(base64.b64decode(response["patch"]))
    assert {op["path"] for op in ops} >= {
        "/metadata/annotations",
        "/spec/initContainers",
        "/spec/volumes",
        "/spec/containers/0/env",
        "/spec/containers/0/volumeMounts",
        "/spec/securityContext",
    }
    assert mutated["spec"]["securityContext"]["fsGroup"] == 10001


# --------------------------------------------------------------------------- refusals


REFUSALS = [
    (
        "fuse-in-restricted-namespace",
        {},
        {},
        "/mutate/pss-enforced",
        "enforces the Pod Security level baseline or restricted",
    ),
    ("runAsNonRoot", {}, {"securityContext": {"runAsNonRoot": True}}, "/mutate", "runAsNonRoot: true"),
    ("user-namespace", {}, {"hostUsers": False}, "/mutate", "hostUsers: false"),
    ("windows", {}, {"os": {"name": "windows"}}, "/mutate", "Linux only"),
    (
        "volume-clash",
        {},
        {"volumes": [{"name": "epochfs-cache", "emptyDir": {}}]},
        "/mutate",
        "already has a volume named 'epochfs-cache'",
    ),
    (
        "container-clash",
        {},
        {"initContainers": [{"name": "epochfs", "image": "busybox"}]},
        "/mutate",
        "already has a container named 'epochfs'",
    ),
    ("unknown-profile", {"epochfs.io/profile": "huge"}, {}, "/mutate", "no profile 'huge'"),
    ("bad-capacity", {"epochfs.io/capacity": "lots"}, {}, "/mutate", "epochfs.io/capacity: not a size"),
    ("capacity-over-volume", {"epochfs.io/capacity": "30Gi"}, {}, "/mutate", "more than the cache volume"),
    ("bad-remote", {"epochfs.io/remote": "ftp://host/data"}, {}, "/mutate", "is not a dataset URL"),
    ("shard-out-of-range", {"epochfs.io/shard-index": "1"}, {}, "/mutate", "is not one of 0..0"),
    # A digit to str.isdigit() that int() refuses: answered 500 ("internal error"), no reason.
    ("shard-superscript", {"epochfs.io/shard-index": "\u00b2"}, {}, "/mutate", "is neither a number nor"),
    ("bad-inject", {"epochfs.io/inject": "yes"}, {}, "/mutate", 'neither "true" nor "false"'),
    (
        "no-such-container",
        {"epochfs.io/containers": "trainer,logger"},
        {},
        "/mutate",
        "no container 'logger'",
    ),
    # nodes=4 takes the shard from the completion index, which a non-indexed pod lacks.
    ("no-completion-index", {"epochfs.io/profile": "multi"}, {}, "/mutate", "which this pod does not have"),
]


@pytest.mark.parametrize(
    ("case", "annotations", "spec", "path", "message"), REFUSALS, ids=[r[0] for r in REFUSALS]
)
def test_pods_it_cannot_serve_are_refused_with_the_reason(
    served: Served, case: str, annotations: dict[str, str], spec: dict[str, Any], path: str, message: str
) -> None:
    pod = job_pod(job(annotations=annotations))
    pod["spec"].update(copy.deepcopy(spec))
    assert message in refused(served.client, pod, path=path)


def test_a_container_that_sets_epochfs_variables_or_paths_is_refused(served: Served) -> None:
    pod = job_pod(job())
    pod["spec"]["containers"][0]["env"].append({"name": "EPOCHFS_MOUNT", "value": "/data"})
    assert "sets EPOCHFS_MOUNT itself" in refused(served.client, pod)
    pod = job_pod(job())
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/mnt/epochfs/"}]
    pod["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    assert "mounts something at /mnt/epochfs/" in refused(served.client, pod)


# --------------------------------------------------------------------------- the HTTP side


def test_what_is_not_an_admission_review_is_answered_with_an_error(served: Served) -> None:
    before = served.counts()
    client = served.client
    status, body = client.post("/mutate", b"{not json")
    assert status == 400 and b"not JSON" in body
    status, body = client.post(
        "/mutate",
        json.dumps(
            {"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}
        ).encode(),
    )
    assert status == 400 and b"admissionReviewVersions" in body
    status, body = client.post(
        "/mutate",
        json.dumps(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"kind": {}}}
        ).encode(),
    )
    assert status == 400 and b"no uid" in body
    status, _ = client.post("/mutate", json.dumps(admission_review(job_pod(job()))).encode(), "text/plain")
    assert status == 415
    status, _ = client.post("/validate", b"{}")
    assert status == 404
    # A body over the limit is refused before it is read.
    conn = client.connection()
    conn.putrequest("POST", "/mutate")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", str(served.server.max_body + 1))
    conn.endheaders()
    resp = conn.getresponse()
    assert resp.status == 413 and resp.getheader("Connection") == "close"
    conn.close()
    after = served.counts()
    assert after["error"] - before["error"] == 6
    assert {k: after[k] - before[k] for k in ("mutated", "skipped", "refused")} == {
        "mutated": 0,
        "skipped": 0,
        "refused": 0,
    }


def test_metrics_count_requests_by_result(served: Served) -> None:
    before = served.counts()
    client = served.client
    mutate(client, job_pod(job()))  # mutated, then skipped (the second pass)
    refused(client, job_pod(job(annotations={"epochfs.io/profile": "huge"})))
    after = served.counts()
    assert {k: after[k] - before[k] for k in ("mutated", "skipped", "refused", "error")} == {
        "mutated": 1,
        "skipped": 1,
        "refused": 1,
        "error": 0,
    }


def test_the_webhooks_metrics_live_with_every_other_metric() -> None:
    """One module defines every metric of epochfs (sidecar/metrics.py), the webhook's too, on a
    registry the caller may give; the names are those the webhook always had, plus the build."""
    import epochfs
    from epochfs.sidecar import metrics
    from epochfs.sidecar.webhook import server as server_mod

    assert server_mod.WebhookMetrics is metrics.WebhookMetrics
    registry = CollectorRegistry()
    webhook_metrics = metrics.WebhookMetrics(registry=registry)
    assert webhook_metrics.registry is registry
    webhook_metrics.requests.labels("refused").inc()
    webhook_metrics.profiles.set(3)
    get = registry.get_sample_value
    assert {r: get("epochfs_webhook_requests_total", {"result": r}) for r in metrics.WEBHOOK_RESULTS} == {
        "mutated": 0, "skipped": 0, "refused": 1, "busy": 0, "error": 0}
    assert get("epochfs_webhook_profiles") == 3
    assert get("epochfs_webhook_request_duration_seconds_count") == 0
    assert get("epochfs_build_info", {"version": epochfs.__version__}) == 1
    assert get("process_open_fds") is not None


def test_keep_alive_connections_serve_several_reviews(served: Served) -> None:
    """The API server reuses connections: two reviews on one."""
    conn = served.client.connection()
    try:
        for _ in range(2):
            body = json.dumps(admission_review(job_pod(job()))).encode()
            conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            assert resp.status == 200 and json.loads(resp.read())["response"]["patchType"] == "JSONPatch"
    finally:
        conn.close()


def test_a_client_that_does_not_trust_the_ca_cannot_talk_to_it(served: Served) -> None:
    import ssl

    stranger = Client(served.server.server_address[1], pem(make_ca("other")[1]))
    with pytest.raises(ssl.SSLCertVerificationError):
        stranger.post("/mutate", b"{}")
    wrong_name = Client(served.server.server_address[1], pem(make_ca()[1]), server_name="evil.example")
    with pytest.raises(ssl.SSLError):
        wrong_name.post("/mutate", b"{}")


def test_a_renewed_certificate_is_served_without_a_restart(
    profiles: dict[str, Profile], tmp_path: Path
) -> None:
    """cert-manager renews the Secret; the kubelet swaps the mounted files; the next connection
    gets the new certificate. A half-written pair leaves the previous one serving."""
    ca = make_ca()
    for served in serve(profiles, tmp_path, ca):
        first = served.client.peer_serial()
        cert, key, serial = make_leaf(ca, [SERVICE_DNS])
        # The kubelet's atomic update: new files, then a rename over the old names.
        (tmp_path / "new.crt").write_bytes(cert)
        (tmp_path / "new.key").write_bytes(key)
        os.replace(tmp_path / "new.key", tmp_path / "tls.key")
        os.replace(tmp_path / "new.crt", tmp_path / "tls.crt")
        assert served.client.peer_serial() == serial != first
        mutate(served.client, job_pod(job()))
        (tmp_path / "tls.key").write_bytes(b"-----BEGIN PRIVATE KEY-----\ngarbage\n")
        assert served.client.peer_serial() == serial


def test_the_charts_own_certificate_and_ca_bundle_work_with_the_server(
    helm_bin: Path, profiles: dict[str, Profile], tmp_path: Path
) -> None:
    """Without cert-manager the chart makes the pair: the server serves its Secret, and the
    configuration's caBundle verifies it for the Service's name, as the API server does."""
    objs = render(helm_bin, chart_values(), tmp_path)
    [secret] = [o for o in objs if o["kind"] == "Secret" and o["metadata"]["name"].endswith("-webhook-tls")]
    [mwc] = [o for o in objs if o["kind"] == "MutatingWebhookConfiguration"]
    for key in ("tls.crt", "tls.key"):
        (tmp_path / key).write_bytes(base64.b64decode(secret["data"][key]))
    server = AdmissionServer(("127.0.0.1", 0), profiles, TLSFiles(tmp_path / "tls.crt", tmp_path / "tls.key"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        for hook in mwc["webhooks"]:
            client = Client(
                server.server_address[1],
                base64.b64decode(hook["clientConfig"]["caBundle"]),
                server_name=f"{hook['clientConfig']['service']['name']}."
                f"{hook['clientConfig']['service']['namespace']}.svc",
            )
            response = client.review(job_pod(job()), path=hook["clientConfig"]["service"]["path"])["response"]
            if hook["clientConfig"]["service"]["path"] == "/mutate":
                assert response["allowed"] is True and response["patchType"] == "JSONPatch"
            else:  # namespaces that enforce baseline or restricted: the FUSE view's sidecar is refused
                assert response["allowed"] is False and "Pod Security" in response["status"]["message"]
    finally:
        server.shutdown()
        server.server_close()


# --------------------------------------------------------------------------- the command


def test_epochfs_webhook_command_serves_and_stops_on_sigterm(docs: dict[str, Any], tmp_path: Path) -> None:
    write_profiles(docs, tmp_path / "profiles")
    ca = make_ca()
    cert, key, _ = make_leaf(ca, [SERVICE_DNS])
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    proc = subprocess.Popen(
        webhook_cmd(tmp_path / "profiles", tmp_path / "tls.crt", tmp_path / "tls.key",
                    "--host", "127.0.0.1", "--port", "0", "--metrics-port", "0", "--log-level", "INFO"),
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:  # until the server says where it listens
            lines.append(line)
            m = re.search(r"on https port (\d+) \(metrics on (\d+)\)", line)
            if m:
                break
        else:
            raise AssertionError("".join(lines))
        assert "default, folder, hostpath, multi, quiet, ray" in line
        port, metrics_port = int(m.group(1)), int(m.group(2))
        response = Client(port, pem(ca[1])).review(job_pod(job()))["response"]
        assert response["patchType"] == "JSONPatch"
        conn = http.client.HTTPConnection("127.0.0.1", metrics_port, timeout=10)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        assert 'epochfs_webhook_requests_total{result="mutated"} 1.0' in text
        assert "process_cpu_seconds_total" in text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_command_refuses_a_folder_without_the_default_profile(tmp_path: Path) -> None:
    (tmp_path / "profiles").mkdir()
    proc = subprocess.run(
        webhook_cmd(tmp_path / "profiles", tmp_path / "none.crt", tmp_path / "none.key"),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 2 and "no default.json" in proc.stderr


@pytest.mark.parametrize("flag", ["--port", "--metrics-port"])
def test_the_command_names_a_port_in_use(docs: dict[str, Any], tmp_path: Path, flag: str) -> None:
    """Two webhooks on one host, or a port another program took: exit 2 and one line naming the flag
    and the port (before: the OS's "[Errno 98] Address already in use", which neither names)."""
    write_profiles(docs, tmp_path / "profiles")
    cert, key, _ = make_leaf(make_ca(), [SERVICE_DNS])
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        ports = {"--port": "0", "--metrics-port": "0", flag: str(port)}
        proc = subprocess.run(
            webhook_cmd(tmp_path / "profiles", tmp_path / "tls.crt", tmp_path / "tls.key",
                        "--host", "127.0.0.1", *(part for item in ports.items() for part in item)),
            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and f"{flag} {port}: address already in use" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("pair", ["junk-cert", "junk-key", "other-key", "no-key"])
def test_the_command_names_the_file_of_a_pair_it_cannot_serve(docs: dict[str, Any], tmp_path: Path,
                                                               pair: str) -> None:
    """One line naming the flag and the file that is wrong (an exploratory bad-input run: before,
    OpenSSL's "[SSL] PEM lib (_ssl.c:3905)", which names neither)."""
    write_profiles(docs, tmp_path / "profiles")
    cert, key, _ = make_leaf(make_ca(), [SERVICE_DNS])
    crt, pem_key = tmp_path / "tls.crt", tmp_path / "tls.key"
    crt.write_bytes(b"junk\n" if pair == "junk-cert" else cert)
    other = make_leaf(make_ca(), [SERVICE_DNS])[1]
    if pair != "no-key":
        pem_key.write_bytes({"junk-key": b"junk\n", "other-key": other}.get(pair, key))
    proc = subprocess.run(webhook_cmd(tmp_path / "profiles", crt, pem_key, "--host", "127.0.0.1",
                                      "--port", "0", "--metrics-port", "0"),
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    said = {"junk-cert": f"--tls-cert {crt}: not a PEM certificate (",
            "junk-key": f"--tls-key {pem_key}: not the PEM private key of --tls-cert {crt} (",
            "other-key": f"--tls-key {pem_key}: not the PEM private key of --tls-cert {crt} (",
            "no-key": f"--tls-key {pem_key}: No such file or directory"}[pair]
    assert proc.returncode == 2 and proc.stderr.startswith(f"epochfs webhook: {said}"), proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr


def test_the_command_refuses_one_port_for_both_servers(docs: dict[str, Any], tmp_path: Path) -> None:
    write_profiles(docs, tmp_path / "profiles")
    proc = subprocess.run(webhook_cmd(tmp_path / "profiles", tmp_path / "tls.crt", tmp_path / "tls.key",
                                      "--port", "18750", "--metrics-port", "18750"),
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    said = "epochfs webhook: --metrics-port 18750: the same port as --port; give each its own\n"
    assert proc.stderr == said, proc.stderr


# --------------------------------------------------------------------------- review fixes


def test_a_capacity_over_the_charts_share_of_the_volume_is_refused(served: Served) -> None:
    """The chart gives the sidecar 90% of the cache volume (epochfs.capacity): the annotation may
    not take more (20Gi volume: 18Gi passes, 19Gi and the whole volume are refused)."""
    for too_much in ("19Gi", "20Gi"):
        message = refused(served.client, job_pod(job(annotations={"epochfs.io/capacity": too_much})))
        assert f"at most {18 * 1024**3} bytes, 90% of its {20 * 1024**3}" in message, message
    mutated, _ = mutate(served.client, job_pod(job(annotations={"epochfs.io/capacity": "18Gi"})))
    settings = sidecar_settings(container(mutated["spec"], "epochfs"), field_values(mutated))
    assert settings.capacity == 18 * 1024**3


def test_a_pod_without_a_token_gets_none_from_epochfs(served: Served) -> None:
    """automountServiceAccountToken: false: no projected token volume or mount, reporting off."""
    pod = job_pod(job())
    mutated, _ = mutate(served.client, pod)
    assert "epochfs-kube-api-access" in {v["name"] for v in mutated["spec"]["volumes"]}  # the default
    pod = job_pod(job())
    pod["spec"]["automountServiceAccountToken"] = False
    mutated, _ = mutate(served.client, pod)
    spec = mutated["spec"]
    assert "epochfs-kube-api-access" not in {v["name"] for v in spec["volumes"]}
    sidecar = container(spec, "epochfs")
    assert "epochfs-kube-api-access" not in {m["name"] for m in sidecar.get("volumeMounts", [])}
    env = {e["name"]: e for e in sidecar["env"]}
    assert env["EPOCHFS_KUBE_REPORTING"] == {"name": "EPOCHFS_KUBE_REPORTING", "value": "0"}
    assert not {"EPOCHFS_KUBE_STATUS_INTERVAL", "EPOCHFS_KUBE_ERROR_THRESHOLD"} & env.keys()
    settings = sidecar_settings(sidecar, field_values(mutated))
    assert settings.kube_reporting is False
    assert spec["automountServiceAccountToken"] is False


def test_the_body_limit_fits_a_pod_and_no_more() -> None:
    from epochfs.sidecar.webhook import server

    assert server.MAX_BODY_BYTES == 2 * 1024 * 1024


def test_a_review_beyond_the_concurrency_cap_waits_for_a_slot(served: Served) -> None:
    """Every slot taken: the next review waits (a 429 at once failed the pod) and is answered once
    a slot frees, counted as what it is."""
    server = served.server
    slots = hold_slots(server)
    try:
        before = served.counts()
        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(served.client.review, job_pod(job()))
            wait_until(lambda: server.in_flight.waiting == 1, what="the review waiting for a slot")
            give_back(server, slots)
            slots = 0
            assert answer.result()["response"]["allowed"] is True
        after = served.counts()
        assert {k: after[k] - before[k] for k in ("mutated", "busy", "error")} == {
            "mutated": 1, "busy": 0, "error": 0}
    finally:
        give_back(server, slots)


def hold_slots(server: AdmissionServer) -> int:
    """Take every review slot of ``server`` on its own loop; returns how many were taken."""
    wait_until(lambda: server._loop is not None, what="the server's loop running")
    assert server._loop is not None
    taken = 0
    while asyncio.run_coroutine_threadsafe(server.in_flight.take(0), server._loop).result(10):
        taken += 1
    assert taken == server.max_in_flight
    return taken


def give_back(server: AdmissionServer, count: int) -> None:
    assert server._loop is not None
    for _ in range(count):
        server._loop.call_soon_threadsafe(server.in_flight.release)


def test_a_silent_metrics_client_is_cut_off() -> None:
    import socket
    import time

    from epochfs.sidecar.webhook import serving

    assert serving.METRICS_TIMEOUT > 0
    metrics_server = MetricsServer(("127.0.0.1", 0), WebhookMetrics().registry, timeout=0.5)
    thread = threading.Thread(target=metrics_server.serve_forever, daemon=True)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", metrics_server.server_address[1]), timeout=10) as sock:
            started = time.monotonic()
            assert sock.recv(1) == b""  # the server closed the idle connection
            assert time.monotonic() - started < 5
    finally:
        metrics_server.shutdown()
        metrics_server.server_close()


def test_a_client_that_stalls_in_the_tls_handshake_is_cut_off(
    profiles: dict[str, Profile], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection that never sends its ClientHello holds nothing past the handshake timeout."""
    import socket
    import time

    from epochfs.sidecar.webhook import serving

    assert serving.HANDSHAKE_TIMEOUT > 0
    monkeypatch.setattr(serving, "HANDSHAKE_TIMEOUT", 0.5)
    for served in serve(profiles, tmp_path):
        with socket.create_connection(("127.0.0.1", served.server.server_address[1]), timeout=10) as sock:
            started = time.monotonic()
            assert sock.recv(1) == b""  # the server closed the silent connection
            assert time.monotonic() - started < 5


def test_a_remote_the_image_cannot_serve_is_refused(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    """The webhook runs in the sidecar's image: a scheme whose library that image lacks (az:// is
    not in it: adlfs) is refused at admission, not left to fail the sidecar's startup probe for
    half an hour. Here adlfs is installed, so its absence is simulated where the registry looks."""
    import importlib.util

    from epochfs.sidecar.remote import registry

    real = importlib.util.find_spec
    monkeypatch.setattr(registry.importlib.util, "find_spec",
                        lambda name, *a, **k: None if name == "adlfs" else real(name, *a, **k))
    assert registry.missing_library("az") == "adlfs (pip install 'epochfs[azure]')"
    assert registry.missing_library("s3") is None
    pod = job_pod(job(annotations={"epochfs.io/remote": "az://container/data"}))
    assert "cannot serve az:// remotes (it lacks adlfs" in refused(served.client, pod)
    monkeypatch.setattr(registry.importlib.util, "find_spec", real)
    pod = job_pod(job(annotations={"epochfs.io/remote": "az://container/data"}))
    response = served.client.review(pod)["response"]
    assert response["allowed"] is True, response


def test_a_client_gone_mid_connection_is_no_traceback_and_other_errors_keep_theirs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A probe that closed its keep-alive connection without reading the answer filled the
    webhook's log with ``ConnectionResetError`` tracebacks. The event loop reports such errors to
    its exception handler: a client gone is one DEBUG line; a real fault keeps its traceback."""
    import asyncio
    import logging
    import ssl

    from epochfs.sidecar.webhook.server import quiet_gone_clients

    loop = asyncio.new_event_loop()
    try:
        with caplog.at_level(logging.DEBUG):
            for gone in (ConnectionResetError(104, "reset"), BrokenPipeError(32, "pipe"), TimeoutError(),
                         ssl.SSLEOFError()):
                quiet_gone_clients(loop, {"message": "Fatal error on transport", "exception": gone})
            assert "Traceback" not in caplog.text
            assert all(r.levelno == logging.DEBUG and r.exc_info is None for r in caplog.records)
            caplog.clear()
            try:
                raise ValueError("a bug")
            except ValueError as e:
                quiet_gone_clients(loop, {"message": "Task exception was never retrieved", "exception": e})
            assert "Traceback" in caplog.text and "ValueError: a bug" in caplog.text
    finally:
        loop.close()


def test_the_default_host_answers_on_ipv6_and_ipv4() -> None:
    """``--host`` left at its default (``""``) listens on every address of both families: the API
    server calls the webhook at the pod's IP, an IPv6 address on an IPv6-only or IPv6-primary
    cluster (sidecar/listen.py). Checked with real connections to both loopbacks."""
    server = MetricsServer(("", 0), WebhookMetrics().registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        answered = {}
        for host in ("127.0.0.1", "::1"):
            conn = http.client.HTTPConnection(host, port, timeout=5)
            try:
                conn.request("GET", "/metrics")
                answered[host] = conn.getresponse().status
            finally:
                conn.close()
        assert answered == {"127.0.0.1": 200, "::1": 200}, answered
    finally:
        server.shutdown()
        server.server_close()
