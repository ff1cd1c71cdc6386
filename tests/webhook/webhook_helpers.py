"""Helpers of the admission webhook's tests: certificates (cryptography), the chart's injection
documents rendered by the real helm, the pods that the controllers of a Job, a PyTorchJob, a
JobSet and a RayJob create from their templates, and an HTTPS client of the webhook.

The workloads (PyTorchJob, JobSet, RayJob) are validated as they are built
(:func:`validate_workload`), so no test feeds the webhook pods of an object its CRD would refuse.
"""

from __future__ import annotations

import copy
import datetime
import http.client
import json
import socket
import ssl
import sys
import uuid
from pathlib import Path
from typing import Any

import kubernetes_validate
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from helm_helpers import NAMESPACE, RELEASE, as_pod, validate_custom_resource, with_remote

from epochfs.sidecar.webhook.profiles import Profile, load_profiles

SERVICE_DNS = f"{RELEASE}-epochfs-webhook.{NAMESPACE}.svc"
INJECT_LABEL = {"epochfs.io/inject": "true"}

# The profiles the tests render: the chart's values make "default"; the others differ in one way.
PROFILES: dict[str, dict[str, Any]] = {
    "multi": {"nodes": 4},
    "folder": {"sidecar": {"view": "folder"}},
    # false must override true (sprig's merge would keep true).
    "quiet": {"kubeReporting": {"enabled": False}, "metrics": {"enabled": False}},
    # KubeRay's pods declare port 8080 (metrics): the sidecar takes another.
    "ray": {"sidecar": {"healthPort": 8090}, "remote": {"url": "gs://ray-data/train"}},
    "hostpath": {"cache": {"volume": {"type": "hostPath"}}, "nodes": 2},
}


def chart_values(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    values = with_remote({"webhook": {"enabled": True, "profiles": PROFILES}})
    values.update(extra or {})
    return values


def webhook_cmd(profiles: Path, cert: Path, key: Path, *extra: str) -> list[str]:
    """``epochfs webhook`` as the chart's Deployment runs it, from this checkout's interpreter;
    ``extra`` adds options (host, ports, log level). One place for the command line, so a renamed
    option fails every test that starts the server, not one copy of it."""
    return [sys.executable, "-m", "epochfs.sidecar.cli", "webhook", "--profiles", str(profiles),
            "--tls-cert", str(cert), "--tls-key", str(key), *extra]


def profile_documents(objs: list[dict[str, Any]]) -> dict[str, Any]:
    """name -> injection document, from the chart's profiles ConfigMap."""
    [cm] = [
        o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-webhook-profiles")
    ]
    return {key.removesuffix(".json"): json.loads(text) for key, text in cm["data"].items()}


def write_profiles(docs: dict[str, Any], folder: Path) -> dict[str, Profile]:
    """The documents as the mounted ConfigMap holds them (one file each), loaded as the server does."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, doc in docs.items():
        (folder / f"{name}.json").write_text(json.dumps(doc))
    return load_profiles(folder)


# --------------------------------------------------------------------------- certificates


def make_ca(name: str = "test-ca") -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return key, cert


def make_leaf(
    ca: tuple[ec.EllipticCurvePrivateKey, x509.Certificate], dns: list[str]
) -> tuple[bytes, bytes, int]:
    """(certificate PEM, key PEM, serial) for the DNS names, signed by ``ca``."""
    ca_key, ca_cert = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    serial = x509.random_serial_number()
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(serial)
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(d) for d in dns]), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem, serial


def pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


# --------------------------------------------------------------------------- the client


class Client:
    """HTTPS to the webhook on 127.0.0.1, verifying its certificate for ``server_name`` against
    ``ca_pem`` (what the API server does with the configuration's caBundle)."""

    def __init__(self, port: int, ca_pem: bytes, server_name: str = SERVICE_DNS) -> None:
        self.port, self.server_name = port, server_name
        self.context = ssl.create_default_context(cadata=ca_pem.decode())

    def connection(self) -> http.client.HTTPSConnection:
        client = self

        class _Conn(http.client.HTTPSConnection):
            def connect(self) -> None:
                sock = socket.create_connection((self.host, self.port), self.timeout)
                self.sock = client.context.wrap_socket(sock, server_hostname=client.server_name)

        # The context given: without one, each connection would load the system's CA store
        # into a default context of its own (~0.1 s of CPU), unused as connect() wraps with ours.
        return _Conn("127.0.0.1", self.port, timeout=30, context=self.context)

    def post(self, path: str, body: bytes, content_type: str = "application/json") -> tuple[int, bytes]:
        conn = self.connection()
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": content_type})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def review(
        self,
        pod: dict[str, Any],
        *,
        path: str = "/mutate",
        operation: str = "CREATE",
        kind: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        status, body = self.post(
            path, json.dumps(admission_review(pod, operation=operation, kind=kind)).encode()
        )
        assert status == 200, body
        answer: dict[str, Any] = json.loads(body)
        return answer

    def peer_serial(self) -> int:
        conn = self.connection()
        try:
            conn.connect()
            der = conn.sock.getpeercert(binary_form=True)
            assert der is not None
        finally:
            conn.close()
        return x509.load_der_x509_certificate(der).serial_number


def admission_review(
    pod: dict[str, Any],
    *,
    operation: str = "CREATE",
    kind: dict[str, str] | None = None,
    namespace: str = NAMESPACE,
) -> dict[str, Any]:
    """What the API server sends for a pod being created in ``namespace`` (default NAMESPACE)."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": kind or {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": kind or {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": pod["metadata"].get("name", ""),
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
            "object": pod,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


# --------------------------------------------------------------------------- workloads


def job(index: int | None = None, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A batch/v1 Job (Indexed when ``index`` is given) whose template asks for epochfs."""
    template = {
        "metadata": {"labels": {**INJECT_LABEL, "app": "train"}, "annotations": dict(annotations or {})},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "trainer",
                    "image": "ghcr.io/acme/train:v3",
                    "command": ["torchrun", "train.py"],
                    "env": [{"name": "DATA", "value": "$(EPOCHFS_MOUNT)/latest"}],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }
    spec: dict[str, Any] = {"template": template, "backoffLimit": 0}
    if index is not None:
        spec.update(completionMode="Indexed", completions=4, parallelism=4)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": NAMESPACE},
        "spec": spec,
    }


def job_pod(job_obj: dict[str, Any], index: int | None = None) -> dict[str, Any]:
    """The Pod the Job controller creates from the Job's template."""
    template = copy.deepcopy(job_obj["spec"]["template"])
    meta = template.setdefault("metadata", {})
    name = job_obj["metadata"]["name"]
    labels = meta.setdefault("labels", {})
    labels.update(
        {
            "batch.kubernetes.io/job-name": name,
            "job-name": name,
            "batch.kubernetes.io/controller-uid": "8c6c2d3e-5b2a-4f38-9a55-1f4ab6e0b1a1",
        }
    )
    ann = meta.setdefault("annotations", {})
    if index is not None:
        labels["batch.kubernetes.io/job-completion-index"] = str(index)
        ann["batch.kubernetes.io/job-completion-index"] = str(index)
    spec = template["spec"]
    if index is not None:
        spec["hostname"] = f"{name}-{index}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **meta,
            "generateName": f"{name}-{'' if index is None else f'{index}-'}",
            "namespace": NAMESPACE,
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": name,
                    "uid": "8c6c2d3e-5b2a-4f38-9a55-1f4ab6e0b1a1",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }


# --------------------------------------------------------------------------- workloads' schemas

# The custom resources against their CRDs (helm_helpers.validate_custom_resource); their pod and Job
# templates ({type: object} there) checked as Pods and Jobs below, on these versions.
K8S_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())


def validate_k8s(obj: dict[str, Any]) -> None:
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(obj, version, strict=True)


def validate_workload(obj: dict[str, Any]) -> dict[str, Any]:
    """A PyTorchJob, JobSet or RayJob against its CRD's schema; then every pod template in it as
    the Pod (and a JobSet's Job template as the Job) its controller creates, strictly
    (kubernetes-validate). Returns the object."""
    validate_custom_resource(obj)
    kind = obj["kind"]
    spec = obj["spec"]
    if kind == "PyTorchJob":
        for role, replica in spec["pytorchReplicaSpecs"].items():
            validate_k8s(as_pod(replica["template"], f"{obj['metadata']['name']}-{role.lower()}-0"))
    elif kind == "JobSet":
        for rjob in spec["replicatedJobs"]:
            name = f"{obj['metadata']['name']}-{rjob['name']}-0"
            validate_k8s({"apiVersion": "batch/v1", "kind": "Job",
                          "metadata": {"name": name, "namespace": NAMESPACE},
                          "spec": rjob["template"]["spec"]})
    elif kind == "RayJob":
        cluster = spec["rayClusterSpec"]
        templates = {"head": cluster["headGroupSpec"]["template"]}
        templates.update({g["groupName"]: g["template"] for g in cluster["workerGroupSpecs"]})
        for group, template in templates.items():
            validate_k8s(as_pod(template, f"{obj['metadata']['name']}-{group}-0"))
    return obj


def pytorchjob(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A Kubeflow PyTorchJob (kubeflow.org/v1) with a Master and three Workers."""

    def replica(count: int) -> dict[str, Any]:
        return {
            "replicas": count,
            "restartPolicy": "OnFailure",
            "template": {
                "metadata": {"labels": dict(INJECT_LABEL), "annotations": dict(annotations or {})},
                "spec": {
                    "containers": [
                        {
                            "name": "pytorch",
                            "image": "ghcr.io/acme/train:v3",
                            "command": ["python", "train.py"],
                            "ports": [{"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"}],
                        }
                    ]
                },
            },
        }

    return validate_workload({
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "ddp", "namespace": NAMESPACE},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(3)}},
    })


def pytorchjob_worker_pod(obj: dict[str, Any], index: int) -> dict[str, Any]:
    """A Worker pod as the training operator creates it: its labels, the rendezvous env."""
    template = copy.deepcopy(obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"])
    name = obj["metadata"]["name"]
    meta = template["metadata"]
    meta["labels"].update(
        {
            "training.kubeflow.org/job-name": name,
            "training.kubeflow.org/operator-name": "pytorchjob-controller",
            "training.kubeflow.org/replica-type": "worker",
            "training.kubeflow.org/replica-index": str(index),
        }
    )
    spec = template["spec"]
    spec["restartPolicy"] = "OnFailure"
    spec["containers"][0]["env"] = [
        {"name": "MASTER_PORT", "value": "23456"},
        {"name": "MASTER_ADDR", "value": f"{name}-master-0"},
        {"name": "WORLD_SIZE", "value": "4"},
        {"name": "RANK", "value": str(index + 1)},
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**meta, "name": f"{name}-worker-{index}", "namespace": NAMESPACE},
        "spec": spec,
    }


def jobset(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A JobSet (jobset.x-k8s.io/v1alpha2): one replicated Indexed Job of 4 pods."""
    pod_template = {
        "metadata": {"labels": dict(INJECT_LABEL), "annotations": dict(annotations or {})},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "trainer",
                    "image": "ghcr.io/acme/train:v3",
                    "command": ["torchrun", "train.py"],
                    "securityContext": {
                        "runAsNonRoot": True,
                        "runAsUser": 10001,
                        "allowPrivilegeEscalation": False,
                        "capabilities": {"drop": ["ALL"]},
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                }
            ],
        },
    }
    return validate_workload({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "sweep", "namespace": NAMESPACE},
        "spec": {
            "network": {"enableDNSHostnames": True},
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "completionMode": "Indexed",
                            "completions": 4,
                            "parallelism": 4,
                            "backoffLimit": 0,
                            "template": pod_template,
                        }
                    },
                }
            ],
        },
    })


def jobset_pod(obj: dict[str, Any], index: int) -> dict[str, Any]:
    """The Pod the JobSet's Job creates: the JobSet labels, then the Job controller's."""
    rjob = obj["spec"]["replicatedJobs"][0]
    job_obj = {
        "metadata": {"name": f"{obj['metadata']['name']}-{rjob['name']}-0"},
        "spec": copy.deepcopy(rjob["template"]["spec"]),
    }
    job_obj["spec"]["template"]["metadata"]["labels"].update(
        {
            "jobset.sigs.k8s.io/jobset-name": obj["metadata"]["name"],
            "jobset.sigs.k8s.io/replicatedjob-name": rjob["name"],
            "jobset.sigs.k8s.io/job-index": "0",
        }
    )
    pod = job_pod(job_obj, index)
    pod["spec"]["subdomain"] = obj["metadata"]["name"]
    return pod


def rayjob(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A KubeRay RayJob (ray.io/v1) whose worker group asks for epochfs."""
    worker = {
        "metadata": {"labels": dict(INJECT_LABEL), "annotations": dict(annotations or {})},
        "spec": {
            "containers": [
                {
                    "name": "ray-worker",
                    "image": "rayproject/ray:2.40.0",
                    "resources": {"limits": {"cpu": "4", "memory": "16Gi"}},
                    "volumeMounts": [{"name": "ray-logs", "mountPath": "/tmp/ray"}],
                }
            ],
            "volumes": [{"name": "ray-logs", "emptyDir": {}}],
        },
    }
    return validate_workload({
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "tune", "namespace": NAMESPACE},
        "spec": {
            "entrypoint": "python tune.py",
            "rayClusterSpec": {
                "headGroupSpec": {
                    "rayStartParams": {},
                    "template": {
                        "spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.40.0"}]}
                    },
                },
                # minReplicas and maxReplicas are required by the CRD (with defaults the API
                # server fills; the schema check does not default): a fixed group of 2.
                "workerGroupSpecs": [
                    {"groupName": "gpu", "replicas": 2, "minReplicas": 2, "maxReplicas": 2,
                     "rayStartParams": {}, "template": worker}
                ],
            },
        },
    })


def rayjob_worker_pod(obj: dict[str, Any]) -> dict[str, Any]:
    """A worker Pod as KubeRay builds it: its labels, the wait-for-GCS init container, ports."""
    template = copy.deepcopy(obj["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"])
    cluster = f"{obj['metadata']['name']}-raycluster-x7k2p"
    meta = template["metadata"]
    meta["labels"].update(
        {
            "ray.io/cluster": cluster,
            "ray.io/group": "gpu",
            "ray.io/node-type": "worker",
            "ray.io/is-ray-node": "yes",
            "app.kubernetes.io/created-by": "kuberay-operator",
        }
    )
    spec = template["spec"]
    worker = spec["containers"][0]
    worker["ports"] = [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
    worker["env"] = [
        {"name": "RAY_IP", "value": f"{cluster}-head-svc.{NAMESPACE}.svc.cluster.local"},
        {
            "name": "RAY_CLUSTER_NAME",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['ray.io/cluster']"}},
        },
    ]
    spec["initContainers"] = [
        {
            "name": "wait-gcs-ready",
            "image": "rayproject/ray:2.40.0",
            "command": ["/bin/bash", "-lc", "--"],
            "args": ["until ray health-check --address $RAY_IP:6379; do sleep 5; done"],
            "env": [{"name": "RAY_IP", "value": worker["env"][0]["value"]}],
        }
    ]
    spec["restartPolicy"] = "Never"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**meta, "generateName": f"{cluster}-gpu-worker-", "namespace": NAMESPACE},
        "spec": spec,
    }
