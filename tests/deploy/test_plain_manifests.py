"""The plain YAML of deploy/ (issue 23, "Without Helm"): rendered from the chart, never drifting.

scripts/render-manifests.py (``make manifests``) renders deploy/ with the real helm; here it renders
again into a temporary folder and every file must be byte-identical to the committed one. Every
object validates strictly with kubernetes-validate (1.29 and the newest) except cert-manager's
Issuer and Certificate: its CRDs are not vendored in tests/deploy/crds/, so those two kinds are
checked for shape only. The Kustomize example builds with the real kubectl and carries its settings
into every place the namespace, the image and the remote appear, the profiles' JSON included.
"""

from __future__ import annotations

import filecmp
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from helm_helpers import ROOT, helm_binary

from epochfs.sidecar.webhook.profiles import profiles_from_documents

DEPLOY = ROOT / "deploy"
SCRIPT = ROOT / "scripts" / "render-manifests.py"
REGENERATE = "make manifests  (or: .venv/bin/python scripts/render-manifests.py)"
K8S_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
# Not validated against a schema: cert-manager's CRDs are not vendored.
CERT_MANAGER_KINDS = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "Certificate")}
WEBHOOK_KINDS = {
    "Namespace", "ConfigMap", "Deployment", "PodDisruptionBudget", "NetworkPolicy", "Service",
    "MutatingWebhookConfiguration", "Issuer", "Certificate",
}
PLACEHOLDER_REMOTE = "s3://CHANGE-ME/dataset"


def load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("deploy")
    subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--helm", str(helm_binary())],
                   check=True, capture_output=True, text=True, timeout=600)
    return out


@pytest.fixture(scope="module")
def kubectl() -> Path:
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "get-helm.py"), "--which", "kubectl"],
                         check=True, capture_output=True, text=True, timeout=600)
    return Path(out.stdout.strip().splitlines()[-1])


def test_committed_files_are_what_the_chart_renders(rendered: Path) -> None:
    assert DEPLOY.is_dir(), f"deploy/ is missing: run {REGENERATE}"
    want, have = files(rendered), files(DEPLOY)
    assert have == want, (
        f"deploy/ has other files than the render (missing {sorted(want - have)}, extra "
        f"{sorted(have - want)}): run {REGENERATE}"
    )
    _, mismatch, errors = filecmp.cmpfiles(rendered, DEPLOY, sorted(want), shallow=False)
    assert not mismatch and not errors, (
        f"deploy/ differs from the chart's render in {mismatch + errors}: the chart changed and "
        f"deploy/ was not regenerated; run {REGENERATE}"
    )


def test_every_file_says_it_is_generated() -> None:
    version = yaml.safe_load((ROOT / "helm" / "epochfs" / "Chart.yaml").read_text())["version"]
    for name in sorted(files(DEPLOY)):
        head = (DEPLOY / name).read_text().splitlines()[:8]
        assert head[0].startswith("# GENERATED: do not edit."), name
        assert any(f"helm/epochfs {version} " in line and "make manifests" in line for line in head), name


@pytest.mark.parametrize("folder", ["webhook", "job"])
def test_every_object_validates_strictly(folder: str) -> None:
    objs = [o for p in sorted((DEPLOY / folder).glob("*.yaml")) for o in load(p)]
    assert objs
    for obj in objs:
        assert "helm.sh/hook" not in obj["metadata"].get("annotations", {}), obj["metadata"]["name"]
        if (obj["apiVersion"], obj["kind"]) in CERT_MANAGER_KINDS:
            assert obj["metadata"]["name"] and obj["spec"]
            continue
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)


def test_the_webhook_install_is_complete_and_uses_cert_manager() -> None:
    objs = [o for p in sorted((DEPLOY / "webhook").glob("*.yaml")) for o in load(p)]
    assert {o["kind"] for o in objs} == WEBHOOK_KINDS  # no Secret: cert-manager makes it
    namespaced = [o for o in objs if o["kind"] not in ("Namespace", "MutatingWebhookConfiguration")]
    assert {o["metadata"]["namespace"] for o in namespaced} == {"epochfs-system"}
    [mwc] = [o for o in objs if o["kind"] == "MutatingWebhookConfiguration"]
    inject = mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    assert inject == "epochfs-system/epochfs-webhook"
    assert all("caBundle" not in hook["clientConfig"] for hook in mwc["webhooks"])
    [profiles] = [o for o in objs if o["kind"] == "ConfigMap"]
    assert sorted(profiles["data"]) == ["default.json", "folder.json"]
    # The Kustomization (no extension) lists exactly the YAML files, which `kubectl apply -f` takes.
    base = yaml.safe_load((DEPLOY / "webhook" / "Kustomization").read_text())
    assert sorted(base["resources"]) == sorted(p.name for p in (DEPLOY / "webhook").glob("*.yaml"))


def test_the_job_runs_the_sidecar() -> None:
    objs = load(DEPLOY / "job" / "job.yaml")
    [job] = [o for o in objs if o["kind"] == "Job"]
    assert job["metadata"]["namespace"] == "default"
    spec = job["spec"]["template"]["spec"]
    [sidecar] = [c for c in spec["initContainers"] if c["name"] == "epochfs"]
    assert sidecar["restartPolicy"] == "Always"
    assert {"name": "EPOCHFS_REMOTE", "value": PLACEHOLDER_REMOTE} in sidecar["env"]


def test_the_kustomize_example_builds_with_its_settings(kubectl: Path) -> None:
    example = DEPLOY / "kustomize" / "example"
    proc = subprocess.run([str(kubectl), "kustomize", str(example)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    objs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    settings = next(o for o in load(example / "settings.yaml") if o["kind"] == "ConfigMap")["data"]
    namespace, image, remote = settings["namespace"], settings["image"], settings["remote"]
    assert "epochfs-system" not in proc.stdout and PLACEHOLDER_REMOTE not in proc.stdout
    assert "ghcr.io/epochfs" not in proc.stdout
    assert "epochfs-settings" not in proc.stdout  # local-config: read, never applied
    assert {o["kind"] for o in objs} == WEBHOOK_KINDS

    [deploy] = [o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "epochfs-webhook"]
    assert deploy["metadata"]["namespace"] == namespace
    assert [c["image"] for c in deploy["spec"]["template"]["spec"]["containers"]] == [image]
    assert deploy["spec"]["template"]["metadata"]["annotations"]["epochfs.io/settings-remote"] == remote
    [ns] = [o for o in objs if o["kind"] == "Namespace"]
    assert ns["metadata"]["name"] == namespace
    [cert] = [o for o in objs if o["kind"] == "Certificate" and not o["spec"].get("isCA")]
    assert cert["spec"]["dnsNames"] == [f"epochfs-webhook.{namespace}.svc", f"epochfs-webhook.{namespace}",
                                        "epochfs-webhook"]
    [mwc] = [o for o in objs if o["kind"] == "MutatingWebhookConfiguration"]
    assert mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{namespace}/epochfs-webhook"
    assert {h["clientConfig"]["service"]["namespace"] for h in mwc["webhooks"]} == {namespace}
    [profiles] = [o for o in objs if o["kind"] == "ConfigMap"]
    assert profiles["metadata"]["namespace"] == namespace
    docs = {key.removesuffix(".json"): json.loads(text) for key, text in profiles["data"].items()}
    assert sorted(profiles_from_documents(docs)) == ["default", "folder"]  # what the server loads
    for key, doc in docs.items():  # still JSON after the piece-wise replacements
        [sidecar] = doc["sidecarContainers"]
        assert sidecar["image"] == image, key
        assert {"name": "EPOCHFS_REMOTE", "value": remote} in sidecar["env"], key
    for obj in objs:
        if (obj["apiVersion"], obj["kind"]) not in CERT_MANAGER_KINDS:
            kubernetes_validate.validate(obj, K8S_VERSIONS[-1], strict=True)
