"""epochfs attached to workloads users already have (issue 9, C), rendered by the real helm.

examples/kubernetes is a parent chart that depends on helm/epochfs (file://, `helm dependency
update` as a user runs it) with job.enabled=false, and renders a plain Pod, a Kubeflow PyTorchJob
or a JobSet from the chart's named templates (helm/epochfs/templates/_attach.tpl). The Pod is
validated strictly against the Kubernetes schema; the pod templates inside the PyTorchJob and the
JobSet's Job template likewise (as the Pods and Jobs their controllers create), and the custom
resources' own fields against their CRDs' schemas (examples/kubernetes/crd-schemas, strict: an
unknown field is an error). The sidecar a parent gets must be the chart's own, field for field.
"""

from __future__ import annotations

import copy
import os
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from helm_helpers import (
    CHART,
    EXAMPLES,
    NAMESPACE,
    RELEASE,
    as_pod,
    build_examples,
    container,
    env_of,
    example_values,
    helm,
    mounts_of,
    one,
    pod_spec,
    render,
    render_example,
    render_pod_snippet,
    validate_custom_resource,
    with_remote,
    workload_of,
)

from epochfs.sidecar import config

K8S_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
REPLICA_INDEX = "metadata.labels['training.kubeflow.org/replica-index']"
COMPLETION_INDEX = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
SHARED_KINDS = ["Pod", "Role", "RoleBinding", "Service", "ServiceAccount"]  # the Pod: helm test's hook


@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One copy of the example chart (and its dependency) for the module."""
    return tmp_path_factory.mktemp("attach")


def validate(obj: dict[str, Any], versions: tuple[str, ...] = K8S_VERSIONS) -> None:
    for version in versions:
        kubernetes_validate.validate(obj, version, strict=True)


def sidecar_settings(c: dict[str, Any], fields: dict[str, str]) -> config.SidecarSettings:
    """The sidecar's env as `epochfs sidecar` parses it, with the downward API filled from `fields`."""
    env = {}
    for e in c["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            env[e["name"]] = fields.get(e["valueFrom"]["fieldRef"]["fieldPath"], "from-downward-api")
    return config.parse(config.SidecarSettings, [], environ=env)


def check_attached(spec: dict[str, Any], trainer_name: str) -> None:
    """What every attached pod must hold, whoever renders it: the view in a subdirectory of the
    shared volume, propagated to a read-only trainer, and the cache read-only in both."""
    side, trainer = container(spec, "epochfs"), container(spec, trainer_name)
    view = env_of(side)["EPOCHFS_MOUNT"]
    assert view == "/mnt/epochfs/view" and env_of(trainer)["EPOCHFS_MOUNT"] == view
    assert mounts_of(side)["/mnt/epochfs"]["mountPropagation"] == "Bidirectional"
    t_view = mounts_of(trainer)["/mnt/epochfs"]
    assert t_view == {"name": "epochfs-mount", "mountPath": "/mnt/epochfs",
                      "mountPropagation": "HostToContainer", "readOnly": True}
    ro = mounts_of(trainer)["/var/cache/epochfs-ro"]
    assert ro["name"] == "epochfs-cache" and ro["readOnly"] is True
    assert env_of(side)["EPOCHFS_LINK_ROOT"] == "/var/cache/epochfs-ro/objects"
    for m in trainer["volumeMounts"]:
        if m["name"].startswith("epochfs-") and m["name"] != "epochfs-control":
            assert m["readOnly"] is True, m
    names = [v["name"] for v in spec["volumes"]]
    assert len(names) == len(set(names))
    for c in spec.get("initContainers", []) + spec["containers"]:
        for m in c.get("volumeMounts", []):
            assert m["name"] in names, (c["name"], m)
    assert spec["automountServiceAccountToken"] is False
    assert env_of(trainer)["EPOCHFS_SHARD_INDEX"] == env_of(side)["EPOCHFS_SHARD_INDEX"]


# --------------------------------------------------------------------------- the example chart


def test_example_chart_builds_and_lints(helm_bin: Path, tmp: Path) -> None:
    chart = build_examples(helm_bin, tmp)
    assert [p.name for p in (chart / "charts").iterdir()] == ["epochfs-0.1.0.tgz"]
    for workload, nodes in (("pod", 1), ("pytorchjob", 3), ("jobset", 4)):
        values = example_values(workload, {"nodes": nodes})
        proc = helm(helm_bin, "lint", "--strict", str(chart), values=values, tmp=tmp)
        assert "0 chart(s) failed" in proc.stdout, proc.stdout
    # The repository's example folder stays clean (the test built a copy).
    assert not (EXAMPLES / "charts").exists() or not any((EXAMPLES / "charts").iterdir())


@pytest.mark.parametrize("workload", ["pod", "pytorchjob", "jobset"])
def test_epochfs_renders_only_its_shared_objects(helm_bin: Path, tmp: Path, workload: str) -> None:
    """The dependency with job.enabled=false: no Job, no NetworkPolicy, and its metrics Service
    selects the workload's pods."""
    objs = render_example(helm_bin, workload, {"nodes": 2}, tmp)
    epochfs = [o for o in objs
               if o["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == "epochfs"]
    assert sorted(o["kind"] for o in epochfs) == SHARED_KINDS
    for obj in epochfs:
        validate(obj)
    svc = one(objs, "Service")
    assert [p["name"] for p in svc["spec"]["ports"]] == ["metrics"]
    kind = {"pod": "Pod", "pytorchjob": "PyTorchJob", "jobset": "JobSet"}[workload]
    w = workload_of(objs, kind)
    templates = {"pod": lambda: [w],
                 "pytorchjob": lambda: list(w["spec"]["pytorchReplicaSpecs"].values()),
                 "jobset": lambda: [r["template"]["spec"] for r in w["spec"]["replicatedJobs"]]}[workload]()
    # The example's own NetworkPolicy (the chart renders none for pods it does not own).
    np = one(objs, "NetworkPolicy")
    validate(np)
    assert np["metadata"]["name"] == f"{RELEASE}-{workload}" and "labels" not in np["metadata"]
    assert np["spec"]["ingress"][1] == {"ports": [{"port": 8080, "protocol": "TCP"}]}
    for t in templates:
        labels = (t["metadata"] if workload == "pod" else t["template"]["metadata"])["labels"]
        assert svc["spec"]["selector"].items() <= labels.items()
        assert np["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
        assert np["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"].items() <= labels.items()
    sa, binding = one(objs, "ServiceAccount"), one(objs, "RoleBinding")
    assert binding["subjects"][0]["name"] == sa["metadata"]["name"]


# --------------------------------------------------------------------------- the plain Pod


def test_pod_snippet_is_valid_and_carries_the_charts_own_sidecar(helm_bin: Path, tmp: Path) -> None:
    values = {"cache": {"volume": {"size": "50Gi"}}, "sidecar": {"minSamples": 8}}
    pod = render_pod_snippet(helm_bin, values, tmp)
    validate(pod)
    assert pod["metadata"]["namespace"] == NAMESPACE
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never"
    assert [c["name"] for c in spec["initContainers"]] == ["epochfs"]
    assert [c["name"] for c in spec["containers"]] == ["trainer"]
    check_attached(spec, "trainer")
    # Field for field the sidecar, volumes and trainer mounts/env of the chart's own Job.
    job = pod_spec(render(helm_bin, with_remote(values), tmp))
    assert container(spec, "epochfs") == container(job, "epochfs")
    job_volumes = [v for v in job["volumes"] if v["name"] != "dshm"]
    assert [v for v in spec["volumes"] if v["name"].startswith("epochfs-")] == job_volumes
    pod_trainer, job_trainer = container(spec, "trainer"), container(job, "trainer")
    assert pod_trainer["env"][:4] == job_trainer["env"][:4]
    assert [e["name"] for e in pod_trainer["env"][:4]] == ["EPOCHFS_MOUNT", "EPOCHFS_CACHE",
                                                           "EPOCHFS_REPORT_URL", "EPOCHFS_SHARD_INDEX"]
    assert pod_trainer["volumeMounts"][:2] == job_trainer["volumeMounts"][:2]
    assert spec["serviceAccountName"] == job["serviceAccountName"]
    assert spec["securityContext"] == job["securityContext"]
    assert spec["terminationGracePeriodSeconds"] == job["terminationGracePeriodSeconds"]
    ann = pod["metadata"]["annotations"]
    assert ann == {"prometheus.io/scrape": "true", "prometheus.io/port": "8080",
                   "prometheus.io/path": "/metrics"}
    settings = sidecar_settings(container(spec, "epochfs"), {})
    assert (settings.shard_index, settings.shard_count, settings.min_samples) == (0, 1, 8)
    assert settings.capacity == 50 * 1024**3 * 9 // 10


def test_pod_snippet_takes_the_callers_trainer_and_shard(helm_bin: Path, tmp: Path) -> None:
    """What the container test relies on: its own trainer image and command, a chosen shard."""
    pod = render_pod_snippet(
        helm_bin, {"nodes": 3, "metrics": {"enabled": False}, "kubeReporting": {"enabled": False}}, tmp,
        parent_values={"trainer": {"image": "localhost/trainer:test", "command": ["python3", "/t.py"],
                                   "args": ["--epochs", "2"]},
                       "pod": {"shardIndex": 2, "labels": {"run": "ct"}}})
    validate(pod)
    trainer = container(pod["spec"], "trainer")
    assert (trainer["image"], trainer["command"], trainer["args"]) == (
        "localhost/trainer:test", ["python3", "/t.py"], ["--epochs", "2"])
    assert pod["metadata"]["name"] == f"{RELEASE}-train-2" and pod["metadata"]["labels"]["run"] == "ct"
    assert "annotations" not in pod["metadata"]
    for name in ("epochfs", "trainer"):
        assert env_of(container(pod["spec"], name))["EPOCHFS_SHARD_INDEX"] == "2"
    settings = sidecar_settings(container(pod["spec"], "epochfs"), {})
    assert (settings.shard_index, settings.shard_count) == (2, 3)
    assert "epochfs-kube-api-access" not in {v["name"] for v in pod["spec"]["volumes"]}


def test_pod_snippet_refuses_a_shard_outside_the_nodes(helm_bin: Path, tmp: Path) -> None:
    chart = build_examples(helm_bin, tmp)
    values = example_values("pod", {"nodes": 2}, {"pod": {"shardIndex": 2}})
    proc = helm(helm_bin, "template", RELEASE, str(chart), values=values, tmp=tmp, check=False)
    assert proc.returncode != 0 and "shardIndex 2 is not one of 0..1 (nodes=2)" in proc.stderr


def test_pod_snippet_in_legacy_mode_for_older_clusters(helm_bin: Path, tmp: Path) -> None:
    """sidecar.native=false: the sidecar is a regular container, the trainer's command is wrapped
    (wait for the sidecar's readiness, then tell the sidecar to stop), and it validates on 1.25
    to 1.28; the native sidecar is refused there with advice."""
    values = {"sidecar": {"native": False}}
    objs = render_example(helm_bin, "pod", values, tmp, args=("--kube-version", "1.25.0"))
    pod = workload_of(objs, "Pod")
    validate(pod, ("1.25.0", "1.28.0", K8S_VERSIONS[-1]))
    spec = pod["spec"]
    assert "initContainers" not in spec
    assert [c["name"] for c in spec["containers"]] == ["epochfs", "trainer"]
    check_attached(spec, "trainer")
    trainer = spec["containers"][1]
    default_cmd = yaml.safe_load((EXAMPLES / "values.yaml").read_text())["trainer"]["command"]
    assert trainer["command"][:2] == ["/bin/sh", "-c"]
    assert trainer["command"][3:] == ["epochfs-trainer", *default_cmd]
    control = "/var/run/epochfs-control"
    assert f"until [ -e {control}/ready ]" in trainer["command"][2]
    assert mounts_of(trainer)[control]["name"] == mounts_of(spec["containers"][0])[control]["name"]
    # Equal to the chart's own legacy Job, wrapper scripts included.
    job = pod_spec(render(helm_bin, with_remote(values), tmp))
    assert container(spec, "epochfs") == container(job, "epochfs")
    assert trainer["command"] == container(job, "trainer")["command"][:3] + trainer["command"][3:]
    chart = build_examples(helm_bin, tmp)
    proc = helm(helm_bin, "template", RELEASE, str(chart), "--kube-version", "1.28.9",
                values=example_values("pod"), tmp=tmp, check=False)
    assert proc.returncode != 0 and "set sidecar.native=false" in proc.stderr


# --------------------------------------------------------------------------- PyTorchJob


def test_pytorchjob_snippet(helm_bin: Path, tmp: Path) -> None:
    objs = render_example(helm_bin, "pytorchjob", {"nodes": 3}, tmp,
                          parent_values={"pytorchjob": {"labels": {"kueue.x-k8s.io/queue-name": "team-a"}}})
    job = workload_of(objs, "PyTorchJob")
    validate_custom_resource(job)
    assert job["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "team-a"}
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert set(replicas) == {"Master", "Worker"}
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 2)
    shards = set()
    for role, spec in replicas.items():
        assert spec["restartPolicy"] in ("Always", "OnFailure", "Never", "ExitCode")
        template = spec["template"]
        validate(as_pod(template, f"{RELEASE}-{role.lower()}-0"))
        pod = template["spec"]
        # The training operator's webhook: a container named pytorch with an image; its port by name.
        pytorch = container(pod, "pytorch")
        assert pytorch["image"]
        assert {"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"} in pytorch["ports"]
        assert "restartPolicy" not in pod  # the operator sets it from the replica spec
        check_attached(pod, "pytorch")
        side = container(pod, "epochfs")
        for index in range(spec["replicas"]):  # what the operator's pods carry
            settings = sidecar_settings(side, {REPLICA_INDEX: str(index)})
            assert settings.shard_count == 3
            shards.add(settings.shard_index)
        if role == "Master":
            assert env_of(side)["EPOCHFS_SHARD_INDEX"] == "2"
        else:
            assert env_of(side)["EPOCHFS_SHARD_INDEX"] == {"fieldRef": {"fieldPath": REPLICA_INDEX}}
    assert shards == {0, 1, 2}  # every pod its own shard, and every shard sampled


def test_pytorchjob_needs_two_nodes(helm_bin: Path, tmp: Path) -> None:
    chart = build_examples(helm_bin, tmp)
    proc = helm(helm_bin, "template", RELEASE, str(chart), values=example_values("pytorchjob", {"nodes": 1}),
                tmp=tmp, check=False)
    assert proc.returncode != 0 and "set epochfs.nodes" in proc.stderr


def test_crd_validation_would_catch_a_typo(helm_bin: Path, tmp: Path) -> None:
    job = workload_of(render_example(helm_bin, "pytorchjob", {"nodes": 2}, tmp), "PyTorchJob")
    bad = copy.deepcopy(job)
    bad["spec"]["pytorchReplicaSpecs"]["Worker"]["replica"] = 2
    with pytest.raises(jsonschema.ValidationError):
        validate_custom_resource(bad)
    bad = copy.deepcopy(job)
    del bad["spec"]["pytorchReplicaSpecs"]
    with pytest.raises(jsonschema.ValidationError):
        validate_custom_resource(bad)
    bad = copy.deepcopy(job)
    master = bad["spec"]["pytorchReplicaSpecs"]["Master"]["template"]
    master["spec"]["initContainers"][0]["mountPropogation"] = "x"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(as_pod(master, "x"))


# --------------------------------------------------------------------------- JobSet


def test_jobset_snippet(helm_bin: Path, tmp: Path) -> None:
    objs = render_example(helm_bin, "jobset", {"nodes": 4}, tmp)
    jobset = workload_of(objs, "JobSet")
    validate_custom_resource(jobset)
    assert jobset["spec"]["network"]["enableDNSHostnames"] is True
    [rjob] = jobset["spec"]["replicatedJobs"]
    assert rjob["replicas"] == 1
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": f"{RELEASE}-{rjob['name']}-0", "namespace": NAMESPACE},
           "spec": rjob["template"]["spec"]}
    validate(job)
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 4
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    check_attached(pod, "trainer")
    side, trainer = container(pod, "epochfs"), container(pod, "trainer")
    assert env_of(side)["EPOCHFS_SHARD_INDEX"] == {"fieldRef": {"fieldPath": COMPLETION_INDEX}}
    shards = {sidecar_settings(side, {COMPLETION_INDEX: str(i)}).shard_index for i in range(4)}
    assert shards == {0, 1, 2, 3}
    t_env = env_of(trainer)
    assert t_env["MASTER_ADDR"] == f"{RELEASE}-{rjob['name']}-0-0.{RELEASE}"
    assert t_env["WORLD_SIZE"] == "4" and t_env["NODE_RANK"] == {"fieldRef": {"fieldPath": COMPLETION_INDEX}}
    ports = {p["name"]: p["containerPort"] for p in trainer["ports"]}
    assert ports == {"rendezvous": int(t_env["MASTER_PORT"])}
    assert len(f"{RELEASE}-{rjob['name']}-0-3") <= 63


# --------------------------------------------------------------------------- any parent chart


def render_parent(helm_bin: Path, tmp: Path, name: str, template: str, values: dict[str, Any],
                  alias: str | None = None) -> subprocess.CompletedProcess[str]:
    """`helm template` of a throwaway parent chart of the epochfs chart (file:// with an absolute
    path) with one template, after `helm dependency update`."""
    chart = tmp / name
    (chart / "templates").mkdir(parents=True)
    dep: dict[str, Any] = {"name": "epochfs", "version": ">=0.1.0-0", "repository": f"file://{CHART}"}
    if alias:
        dep["alias"] = alias
    (chart / "Chart.yaml").write_text(yaml.safe_dump({"apiVersion": "v2", "name": name, "version": "0.1.0",
                                                      "dependencies": [dep]}))
    (chart / "values.yaml").write_text(yaml.safe_dump(values))
    (chart / "templates" / "probe.yaml").write_text(template)
    homes = {f"HELM_{k}_HOME": str(tmp / ".helm" / k.lower()) for k in ("CACHE", "CONFIG", "DATA")}
    env = {**os.environ, **homes}
    dep_proc = subprocess.run([str(helm_bin), "dependency", "update", str(chart)], capture_output=True,
                              text=True, timeout=120, env=env)
    assert dep_proc.returncode == 0, dep_proc.stderr
    return subprocess.run([str(helm_bin), "template", RELEASE, str(chart), "-n", NAMESPACE],
                          capture_output=True, text=True, timeout=120, env=env)


def test_an_aliased_dependency_and_a_deployment(helm_bin: Path, tmp_path: Path) -> None:
    """The templates take .Subcharts.<alias>: here a Deployment, with the dependency named data."""
    template = """\
{{- $e := dict "context" .Subcharts.data "shardIndex" 0 }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: serve
  namespace: {{ .Release.Namespace }}
spec:
  replicas: 1
  selector:
    matchLabels:
      {{- include "epochfs.podLabels" $e | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "epochfs.podLabels" $e | nindent 8 }}
    spec:
      serviceAccountName: {{ include "epochfs.serviceAccountName" $e }}
      automountServiceAccountToken: false
      initContainers:
        {{- include "epochfs.sidecarContainer" $e | nindent 8 }}
      containers:
        - name: app
          image: registry.example/app:1
          env:
            {{- include "epochfs.trainerEnv" $e | nindent 12 }}
          volumeMounts:
            {{- include "epochfs.trainerVolumeMounts" $e | nindent 12 }}
      volumes:
        {{- include "epochfs.volumes" $e | nindent 8 }}
"""
    values = {"data": {"job": {"enabled": False}, "remote": {"url": "gs://bucket/set"},
                       "cache": {"volume": {"type": "hostPath"}}}}
    proc = render_parent(helm_bin, tmp_path, "serve", template, values, alias="data")
    assert proc.returncode == 0, proc.stderr
    objs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    deploy = one(objs, "Deployment")
    validate(deploy)
    spec = deploy["spec"]["template"]["spec"]
    check_attached(spec, "app")
    assert env_of(container(spec, "epochfs"))["EPOCHFS_REMOTE"] == "gs://bucket/set"
    assert {m.get("subPathExpr") for m in container(spec, "app")["volumeMounts"]
            if m["name"] == "epochfs-cache"} == {f"{NAMESPACE}/{RELEASE}/shard-$(EPOCHFS_SHARD_INDEX)"}
    assert one(objs, "ServiceAccount")["metadata"]["name"] == spec["serviceAccountName"] == f"{RELEASE}-data"
    assert not [o for o in objs if o["kind"] in ("Job", "NetworkPolicy")]


@pytest.mark.parametrize(
    ("context", "values", "message"),
    [
        ('(dict "context" .Subcharts.epochfs "shardIndex" 0 "shardIndexFieldPath" "x")',
         {"remote": {"url": "s3://b/p"}}, "give shardIndex or shardIndexFieldPath, not both"),
        ('(dict "context" .Subcharts.epochfs "shardIndex" "first")',
         {"remote": {"url": "s3://b/p"}}, 'shardIndex first is not one of 0..0'),
        (".Subcharts.epochfs", {}, "remote.url is required"),
    ],
)
def test_a_parent_is_told_what_is_wrong(helm_bin: Path, tmp_path: Path, context: str, values: dict[str, Any],
                                        message: str) -> None:
    template = "initContainers:\n  {{- include \"epochfs.sidecarContainer\" " + context + " | nindent 2 }}\n"
    values = {"epochfs": {"job": {"enabled": False}, **values}}
    proc = render_parent(helm_bin, tmp_path, "probe", template, values)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
