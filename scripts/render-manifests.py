#!/usr/bin/env python3
"""Render the Helm chart into the plain YAML of deploy/, for clusters installed without Helm.

What it writes (docs/kubernetes.md, "Without Helm"), every file generated, never edited by hand:

* ``deploy/webhook/``: the admission webhook install (``helm template`` of templates/webhook.yaml
  for release ``epochfs`` in namespace ``epochfs-system``: the profiles ConfigMap, the Deployment,
  its Service and PodDisruptionBudget, the MutatingWebhookConfiguration and, since a CA generated
  at render time cannot be committed, the cert-manager Issuers and Certificates), the Namespace,
  and a ``Kustomization`` listing them (no extension, so ``kubectl apply -f deploy/webhook/``
  skips it while ``kubectl apply -k`` and the component use it). The webhook has no RBAC: its
  server calls no API.
* ``deploy/job/``: the chart's example training Job with the sidecar (and the objects the chart
  renders beside it) for release ``epochfs`` in namespace ``default``, without the helm test pod.
* ``deploy/kustomize/components/epochfs/``: a Kustomize Component over ``deploy/webhook/`` that sets
  the namespace, the image and the default remote from a ``local-config`` ConfigMap
  ``epochfs-settings`` of the kustomization that uses it (the remote and the sidecar's image live
  inside the profiles' JSON documents, which Kustomize's own ``images``/``namespace`` fields do not
  reach: replacements address them as the n-th ``"``-separated piece, counted here);
  ``deploy/kustomize/example/`` uses it.

The remote of both installs is the placeholder ``s3://CHANGE-ME/dataset`` (no S3 bucket may be
named that): pods set ``epochfs.io/remote``, or the Job is edited, or the settings say it.

Usage: ``python scripts/render-manifests.py [--out DIR] [--helm PATH]`` (``make manifests``);
tests/deploy/test_plain_manifests.py renders into a temporary folder and compares it byte for byte.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "epochfs"
COMMAND = "make manifests"  # python scripts/render-manifests.py
RELEASE = "epochfs"
WEBHOOK_NAMESPACE = "epochfs-system"
JOB_NAMESPACE = "default"
# The oldest Kubernetes the webhook serves (native sidecars); the render does not depend on it
# otherwise, and pinning it keeps the files independent of the helm binary's default.
KUBE_VERSION = "1.29.0"
REMOTE = "s3://CHANGE-ME/dataset"
WEBHOOK_VALUES: dict[str, Any] = {
    "remote": {"url": REMOTE},
    "job": {"enabled": False},
    "webhook": {
        "enabled": True,
        "certManager": {"enabled": True},
        # Fixed: the Kustomize component cannot rewrite a name built from the namespace.
        "clusterName": "epochfs-webhook",
        # The profile a namespace that enforces Pod Security baseline/restricted needs.
        "profiles": {"folder": {"sidecar": {"view": "folder"}}},
    },
}
JOB_VALUES: dict[str, Any] = {"remote": {"url": REMOTE}}
SETTINGS = "epochfs-settings"
EXAMPLE_SETTINGS = {
    "namespace": "ml-platform",
    "image": "registry.example.com/ml/epochfs:0.1.0",
    "remote": "s3://datasets/imagenet/train",
}


def chart_versions() -> tuple[str, str]:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return str(chart["version"]), str(chart["appVersion"])


def helm_binary() -> Path:
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "get-helm.py")], check=True,
                         capture_output=True, text=True, timeout=600)
    return Path(out.stdout.strip().splitlines()[-1])


def helm_template(helm: Path, namespace: str, values: dict[str, Any], *extra: str) -> tuple[str, str]:
    """(the rendered text, the command line as written in the headers)."""
    args = ["template", RELEASE, "helm/epochfs", "--namespace", namespace,
            "--kube-version", KUBE_VERSION, *extra]
    text = json.dumps(values, separators=(",", ":"), sort_keys=True)
    proc = subprocess.run([str(helm), *args, "--values", "-"], cwd=ROOT, input=text, capture_output=True,
                          text=True, timeout=120)
    if proc.returncode != 0:
        raise SystemExit(f"render-manifests: helm {' '.join(args)} failed:\n{proc.stderr}")
    return proc.stdout, " ".join(["helm", *args, "--values", "-", "<<<", f"'{text}'"])


def header(what: str, command: str | None = None) -> str:
    version, app = chart_versions()
    lines = [
        f"# GENERATED: do not edit. {what}",
        f"# Rendered from the chart helm/epochfs {version} (appVersion {app}) by `{COMMAND}`",
        "# (scripts/render-manifests.py); tests/deploy/test_plain_manifests.py fails when it drifts.",
    ]
    if command:
        lines.append(f"#   {command}")
    return "\n".join(lines) + "\n"


def objects(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(obj: Any) -> str:
    return yaml.dump(obj, Dumper=_NoAliases, sort_keys=False, width=100)


def quote_index(document: str, value: str, what: str) -> int:
    """The index of ``value`` among the ``"``-separated pieces of a JSON document (exactly one)."""
    pieces = document.split('"')
    found = [i for i, p in enumerate(pieces) if p == value]
    if len(found) != 1:
        raise SystemExit(f"render-manifests: {what}: {value!r} found {len(found)} times, expected once")
    return found[0]


def component(webhook: list[dict[str, Any]], image: str) -> dict[str, Any]:
    """The Component: replacements from the settings ConfigMap into the webhook's objects."""
    source = {"kind": "ConfigMap", "name": SETTINGS}
    namespaced = [
        {"select": {"kind": o["kind"], "name": o["metadata"]["name"]}, "fieldPaths": ["metadata.namespace"]}
        for o in webhook if o["kind"] != "MutatingWebhookConfiguration" and "namespace" in o["metadata"]
    ]
    [mwc] = [o for o in webhook if o["kind"] == "MutatingWebhookConfiguration"]
    [cert] = [o for o in webhook if o["kind"] == "Certificate" and not o["spec"].get("isCA")]
    [deploy] = [o for o in webhook if o["kind"] == "Deployment"]
    [profiles] = [o for o in webhook if o["kind"] == "ConfigMap"]
    dns = cert["spec"]["dnsNames"]
    service = f"{deploy['metadata']['name']}.{WEBHOOK_NAMESPACE}"
    assert dns[:2] == [f"{service}.svc", service], dns
    namespace_targets = [
        {"select": {"kind": "Namespace", "name": WEBHOOK_NAMESPACE}, "fieldPaths": ["metadata.name"]},
        *namespaced,
        {"select": {"kind": "Certificate", "name": cert["metadata"]["name"]},
         "fieldPaths": ["spec.dnsNames.0", "spec.dnsNames.1"], "options": {"delimiter": ".", "index": 1}},
        {"select": {"kind": "MutatingWebhookConfiguration", "name": mwc["metadata"]["name"]},
         "fieldPaths": ["metadata.annotations.[cert-manager.io/inject-ca-from]"],
         "options": {"delimiter": "/", "index": 0}},
        {"select": {"kind": "MutatingWebhookConfiguration", "name": mwc["metadata"]["name"]},
         "fieldPaths": [f"webhooks.{i}.clientConfig.service.namespace" for i in range(len(mwc["webhooks"]))]},
    ]
    # The webhook's own namespace is never sent to it (a replica could not start while none
    # runs): the namespace selector's NotIn list names it, and follows the settings too.
    own = [f"webhooks.{i}.namespaceSelector.matchExpressions.{j}.values.{k}"
           for i, hook in enumerate(mwc["webhooks"])
           for j, expr in enumerate((hook.get("namespaceSelector") or {}).get("matchExpressions", []))
           for k, value in enumerate(expr.get("values", [])) if value == WEBHOOK_NAMESPACE]
    if own:
        namespace_targets.append({"select": {"kind": "MutatingWebhookConfiguration",
                                             "name": mwc["metadata"]["name"]}, "fieldPaths": own})
    cm = {"kind": "ConfigMap", "name": profiles["metadata"]["name"]}
    deployment = {"kind": "Deployment", "name": deploy["metadata"]["name"]}
    containers = [c["name"] for c in deploy["spec"]["template"]["spec"]["containers"]]
    image_targets: list[dict[str, Any]] = [
        {"select": deployment,
         "fieldPaths": [f"spec.template.spec.containers.[name={c}].image" for c in containers]},
    ]
    remote_targets: list[dict[str, Any]] = [
        # A new remote rolls the server's pods (they read the profiles when they start).
        {"select": deployment,
         "fieldPaths": ["spec.template.metadata.annotations.[epochfs.io/settings-remote]"],
         "options": {"create": True}},
    ]
    for key, doc in sorted(profiles["data"].items()):
        image_targets.append({"select": cm, "fieldPaths": [f"data.[{key}]"],
                              "options": {"delimiter": '"', "index": quote_index(doc, image, key)}})
        remote_targets.append({"select": cm, "fieldPaths": [f"data.[{key}]"],
                               "options": {"delimiter": '"', "index": quote_index(doc, REMOTE, key)}})
    return {
        "apiVersion": "kustomize.config.k8s.io/v1alpha1",
        "kind": "Component",
        "resources": ["../../../webhook"],
        "replacements": [
            {"source": {**source, "fieldPath": "data.namespace"}, "targets": namespace_targets},
            {"source": {**source, "fieldPath": "data.image"}, "targets": image_targets},
            {"source": {**source, "fieldPath": "data.remote"}, "targets": remote_targets},
        ],
    }


def render(out: Path, helm: Path) -> None:
    """Write the whole deploy/ tree into ``out`` (its folders replaced, nothing else touched)."""
    for folder in ("webhook", "job", "kustomize"):
        shutil.rmtree(out / folder, ignore_errors=True)
    (out / "webhook").mkdir(parents=True)
    (out / "job").mkdir()

    text, command = helm_template(helm, WEBHOOK_NAMESPACE, WEBHOOK_VALUES,
                                  "--show-only", "templates/webhook.yaml")
    webhook = objects(text)
    (out / "webhook" / "webhook.yaml").write_text(
        header("The epochfs admission webhook; TLS from cert-manager (install it first).", command) + text)
    (out / "webhook" / "namespace.yaml").write_text(
        header("The webhook's namespace.")
        + dump({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": WEBHOOK_NAMESPACE}}))
    (out / "webhook" / "Kustomization").write_text(
        header("deploy/webhook as a Kustomize base (no extension: `kubectl apply -f` skips it).")
        + dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                "resources": ["namespace.yaml", "webhook.yaml"]}))

    text, command = helm_template(helm, JOB_NAMESPACE, JOB_VALUES, "--skip-tests")
    (out / "job" / "job.yaml").write_text(
        header(f"The example training Job with the epochfs sidecar (remote {REMOTE}: edit it).", command)
        + text)

    [image] = {c["image"] for o in webhook if o["kind"] == "Deployment"
               for c in o["spec"]["template"]["spec"]["containers"]}  # the chart's, also the sidecar's
    comp = out / "kustomize" / "components" / "epochfs"
    comp.mkdir(parents=True)
    (comp / "kustomization.yaml").write_text(
        header("The webhook install as a Kustomize Component. The kustomization that uses it\n"
               f"# defines a ConfigMap {SETTINGS} (namespace, image, remote) annotated\n"
               "# config.kubernetes.io/local-config: \"true\" (read, never applied): see\n"
               "# deploy/kustomize/example/. The image and the remote also reach the profiles' JSON\n"
               "# documents, as their n-th '\"'-separated piece (counted by the script).")
        + dump(component(webhook, image)))

    example = out / "kustomize" / "example"
    example.mkdir(parents=True)
    (example / "kustomization.yaml").write_text(
        header("An example kustomization that installs the webhook through the component.")
        + dump({"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                "resources": ["settings.yaml"], "components": ["../components/epochfs"]}))
    (example / "settings.yaml").write_text(
        header("The component's settings: read by its replacements, never applied (local-config).")
        + dump({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": SETTINGS,
                             "annotations": {"config.kubernetes.io/local-config": "true"}},
                "data": EXAMPLE_SETTINGS}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=ROOT / "deploy", help="folder to write (default deploy/)")
    parser.add_argument("--helm", type=Path, help="helm binary (default: scripts/get-helm.py's)")
    ns = parser.parse_args(argv)
    render(ns.out.resolve(), ns.helm or helm_binary())
    print(f"render-manifests: wrote {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
