"""The Helm chart, rendered by the real helm binary for the issue's matrix of values.

Every rendered object is validated by kubernetes-validate (strict: unknown fields are errors)
against Kubernetes 1.29 and the newest version it knows; then the objects are checked for what
the design needs: a native sidecar with probes, mount propagation, the read-only trainer view,
shard env, least privilege, RBAC equal to the calls sidecar/kube/ makes, metrics wiring.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from helm_helpers import (
    CHART,
    MATRIX,
    NAMESPACE,
    RELEASE,
    container,
    env_of,
    helm,
    mounts_of,
    one,
    pod_spec,
    render,
    with_remote,
)

from epochfs.sidecar import config, kube

K8S_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
CRD_GROUPS = ("monitoring.coreos.com/",)  # not in Kubernetes' schemas: checked field by field below


@pytest.fixture(scope="module")
def rendered(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("render")
    return {name: render(helm_bin, with_remote(values), tmp) for name, values in MATRIX.items()}


def test_helm_lint_passes_strict(helm_bin: Path, tmp_path: Path) -> None:
    for values in (with_remote({}), with_remote(MATRIX["multi-node"]), with_remote(MATRIX["legacy-sidecar"])):
        proc = helm(helm_bin, "lint", "--strict", str(CHART), values=values, tmp=tmp_path)
        assert "0 chart(s) failed" in proc.stdout
    ci_values = sorted((CHART / "ci").glob("*-values.yaml"))
    assert len(ci_values) >= 2, ci_values
    for path in ci_values:
        proc = helm(helm_bin, "lint", "--strict", str(CHART), "-f", str(path), tmp=tmp_path)
        assert "0 chart(s) failed" in proc.stdout, path
    # Only the shared objects (no remote needed), and every value of the Job's extras set.
    for values in ({"job": {"enabled": False}}, with_remote(MATRIX["kueue-extras"])):
        proc = helm(helm_bin, "lint", "--strict", str(CHART), values=values, tmp=tmp_path)
        assert "0 chart(s) failed" in proc.stdout


def test_chart_packages_with_its_schema_and_dashboard(helm_bin: Path, tmp_path: Path) -> None:
    import tarfile

    helm(helm_bin, "package", str(CHART), "-d", str(tmp_path), tmp=tmp_path)
    [tgz] = tmp_path.glob("epochfs-*.tgz")
    with tarfile.open(tgz) as t:
        names = set(t.getnames())
    for required in ("values.schema.json", "dashboards/epochfs.json", "templates/NOTES.txt",
                     "templates/_attach.tpl", "templates/tests/test-readyz.yaml"):
        assert f"epochfs/{required}" in names, required


def test_remote_url_is_required(helm_bin: Path, tmp_path: Path) -> None:
    proc = helm(helm_bin, "template", RELEASE, str(CHART), tmp=tmp_path, check=False)
    assert proc.returncode != 0
    assert "remote.url is required" in proc.stderr


@pytest.mark.parametrize("case", sorted(MATRIX))
def test_every_object_validates_strictly(rendered: dict[str, list[dict[str, Any]]], case: str) -> None:
    objs = rendered[case]
    assert {"Job", "ServiceAccount"} <= {o["kind"] for o in objs}
    for obj in objs:
        if obj["apiVersion"].startswith(CRD_GROUPS):
            continue
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)
        assert obj["metadata"]["namespace"] == NAMESPACE


def test_strict_validation_would_catch_a_typo(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """The validation above can fail: a misspelt field in the sidecar is rejected."""
    job = copy.deepcopy(one(rendered["default"], "Job"))
    job["spec"]["template"]["spec"]["initContainers"][0]["mountPropogation"] = "Bidirectional"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(job, K8S_VERSIONS[0], strict=True)


def test_pod_spec_is_consistent(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """What the API server checks beyond the schema: references resolve, names are unique."""
    for case, objs in rendered.items():
        spec = pod_spec(objs)
        volumes = [v["name"] for v in spec["volumes"]]
        assert len(volumes) == len(set(volumes)), case
        containers = spec.get("initContainers", []) + spec["containers"]
        assert len({c["name"] for c in containers}) == len(containers), case
        for c in containers:
            paths = [m["mountPath"] for m in c.get("volumeMounts", [])]
            assert len(paths) == len(set(paths)), (case, c["name"])
            for m in c.get("volumeMounts", []):
                assert m["name"] in volumes, (case, c["name"], m["name"])
                assert not ("subPath" in m and "subPathExpr" in m), (case, m)
                if m.get("mountPropagation") == "Bidirectional":
                    assert c["securityContext"]["privileged"] is True, case
            names = [e["name"] for e in c.get("env", [])]
            assert len(names) == len(set(names)), (case, c["name"], names)
            ports = {p["name"] for p in c.get("ports", [])}
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                if probe in c:
                    assert c[probe]["httpGet"]["port"] in ports, (case, probe)
            if "restartPolicy" in c:
                assert c in spec.get("initContainers", []) and c["restartPolicy"] == "Always", case
        for svc in (o for o in objs if o["kind"] == "Service"):
            targets = {p["targetPort"] for p in svc["spec"]["ports"]}
            named = {p["name"] for c in containers for p in c.get("ports", [])}
            # The sidecar's port by its number (kubernetes#127958), the others by name.
            numbers = {p["containerPort"] for c in containers for p in c.get("ports", [])}
            assert targets <= named | numbers, case


def test_the_sidecar_says_why_it_stopped(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """A refused setting ends the sidecar with its reason in /dev/termination-log (the sidecar's
    --termination-log default); any other end shows the log's last lines in kubectl describe pod."""
    for case, objs in rendered.items():
        spec = pod_spec(objs)
        [car] = [c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == "epochfs"]
        assert car["terminationMessagePolicy"] == "FallbackToLogsOnError", case
        assert car.get("terminationMessagePath", "/dev/termination-log") == "/dev/termination-log", case


def test_native_sidecar_starts_first_with_probes(rendered: dict[str, list[dict[str, Any]]]) -> None:
    spec = pod_spec(rendered["default"])
    assert [c["name"] for c in spec["initContainers"]] == ["epochfs"]
    assert [c["name"] for c in spec["containers"]] == ["trainer"]
    side = spec["initContainers"][0]
    assert side["restartPolicy"] == "Always"
    assert "command" not in side and "args" not in side  # the image's ENTRYPOINT: epochfs sidecar
    port = side["ports"][0]
    assert port["name"] == "metrics" and port["containerPort"] == 8080
    assert side["startupProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert side["startupProbe"]["periodSeconds"] * side["startupProbe"]["failureThreshold"] >= 1800
    assert side["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert side["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert spec["restartPolicy"] == "Never"


def test_mount_is_shared_bidirectional_and_read_only_for_the_trainer(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    for case, objs in rendered.items():
        spec = pod_spec(objs)
        side, trainer = container(spec, "epochfs"), container(spec, "trainer")
        s_env, t_env = env_of(side), env_of(trainer)
        # The shared volume sits at sidecar.mountPath in both containers; the FUSE view is its
        # subdirectory view/ (EPOCHFS_MOUNT, the same in both), never the volume's mount point.
        view = s_env["EPOCHFS_MOUNT"]
        mount_path = "/mnt/epochfs"
        assert view == f"{mount_path}/view" and t_env["EPOCHFS_MOUNT"] == view, case
        s_mounts, t_mounts = mounts_of(side), mounts_of(trainer)
        assert s_mounts[mount_path]["mountPropagation"] == "Bidirectional", case
        assert side["securityContext"]["privileged"] is True, case
        assert t_mounts[mount_path]["mountPropagation"] == "HostToContainer", case
        assert t_mounts[mount_path]["readOnly"] is True, case
        assert s_mounts[mount_path]["name"] == t_mounts[mount_path]["name"] == "epochfs-mount", case
        vols = {v["name"]: v for v in spec["volumes"]}
        assert vols["epochfs-mount"] == {"name": "epochfs-mount", "emptyDir": {}}, case
        for c in (side, trainer):  # no volume is mounted at the view or inside it
            for m in c["volumeMounts"]:
                assert m["mountPath"] != view and not m["mountPath"].startswith(view + "/"), (case, m)
        # Epoch entries are symlinks into the link root: it lies on a read-only mount of the
        # cache volume, at the same path in both containers.
        link_root = Path(s_env["EPOCHFS_LINK_ROOT"])
        ro_path = str(link_root.parent)
        assert s_mounts[ro_path]["readOnly"] is True and t_mounts[ro_path]["readOnly"] is True, case
        assert s_mounts[ro_path]["name"] == t_mounts[ro_path]["name"] == "epochfs-cache", case
        assert s_mounts[ro_path].get("subPathExpr") == t_mounts[ro_path].get("subPathExpr"), case
        cache = s_mounts[s_env["EPOCHFS_CACHE"]]
        assert cache["name"] == "epochfs-cache" and not cache.get("readOnly"), case
        assert cache.get("subPathExpr") == s_mounts[ro_path].get("subPathExpr"), case
        # No writable view of the cache or the mount reaches the trainer.
        for m in trainer["volumeMounts"]:
            if m["name"] in ("epochfs-cache", "epochfs-mount"):
                assert m["readOnly"] is True, (case, m)
        assert settings_mount(spec) == Path(view), case


def settings_mount(spec: dict[str, Any]) -> Path:
    return _sidecar_settings(spec, completion_index=0).mount


def test_view_follows_the_mount_path(helm_bin: Path, tmp_path: Path) -> None:
    """One named template gives the view's path to both containers, for any sidecar.mountPath."""
    spec = pod_spec(render(helm_bin, with_remote({"sidecar": {"mountPath": "/data/epochfs/"}}), tmp_path))
    for name in ("epochfs", "trainer"):
        c = container(spec, name)
        assert env_of(c)["EPOCHFS_MOUNT"] == "/data/epochfs/view", name
        assert mounts_of(c)["/data/epochfs/"]["name"] == "epochfs-mount", name
    assert settings_mount(spec) == Path("/data/epochfs/view")


def test_default_trainer_reads_epoch_0_of_the_view(rendered: dict[str, list[dict[str, Any]]],
                                                   tmp_path: Path) -> None:
    """The default command (a smoke test) runs: it lists $EPOCHFS_MOUNT and its epoch-0/."""
    command = container(pod_spec(rendered["default"]), "trainer")["command"]
    assert command[:2] == ["python", "-c"]
    view = tmp_path / "mnt" / "view"
    (view / "epoch-0" / "train").mkdir(parents=True)
    (view / "epoch-0" / "a.npz").write_bytes(b"x")
    proc = subprocess.run([sys.executable, "-c", command[2]], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "EPOCHFS_MOUNT": str(view)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(view), "['epoch-0']", "2", "['a.npz',", "'train']"]


def test_trainer_is_restricted_in_every_case(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for case, objs in rendered.items():
        spec = pod_spec(objs)
        sc = container(spec, "trainer")["securityContext"]
        assert sc["runAsNonRoot"] is True and sc["runAsUser"] > 0, case
        assert sc["allowPrivilegeEscalation"] is False, case
        assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add"), case
        assert sc["seccompProfile"]["type"] == "RuntimeDefault", case
        assert not sc.get("privileged"), case
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", case
        side = container(spec, "epochfs")["securityContext"]
        assert side["readOnlyRootFilesystem"] is True and side["seccompProfile"]["type"] == "RuntimeDefault"


def _sidecar_settings(spec: dict[str, Any], completion_index: int) -> config.SidecarSettings:
    """Parse the sidecar's env exactly as `epochfs sidecar` does in the pod (downward API filled in)."""
    env: dict[str, str] = {}
    for e in container(spec, "epochfs")["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "job-completion-index" in e["valueFrom"]["fieldRef"]["fieldPath"]:
            env[e["name"]] = str(completion_index)
        else:
            env[e["name"]] = "from-downward-api"
    return config.parse(config.SidecarSettings, [], environ=env)


def test_sidecar_env_parses_into_settings(rendered: dict[str, list[dict[str, Any]]]) -> None:
    for case, objs in rendered.items():
        spec = pod_spec(objs)
        settings = _sidecar_settings(spec, completion_index=0)
        assert settings.remote.startswith("s3://"), case
        assert settings.health_port == 8080, case
        assert str(settings.link_root).startswith("/"), case
    assert _sidecar_settings(pod_spec(rendered["default"]), 0).capacity == 20 * 1024**3 * 9 // 10
    assert _sidecar_settings(pod_spec(rendered["default"]), 0).include is None
    chosen = _sidecar_settings(pod_spec(rendered["credentials-env"]), 0)  # remote.include/exclude
    assert chosen.include is not None and chosen.exclude is not None
    assert (str(chosen.include), str(chosen.exclude)) == ("train/**,*.npy", "**/*.json")
    assert _sidecar_settings(pod_spec(rendered["ephemeral-pvc"]), 0).capacity == 90 * 1024**3


def test_multi_node_is_an_indexed_job_with_shards_and_rendezvous(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    objs = rendered["multi-node"]
    job = one(objs, "Job")
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 4
    spec = job["spec"]["template"]["spec"]
    for name in ("epochfs", "trainer"):
        shard = env_of(container(spec, name))["EPOCHFS_SHARD_INDEX"]
        assert shard["fieldRef"]["fieldPath"] == (
            "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        )
    for index in range(4):
        settings = _sidecar_settings(spec, completion_index=index)
        assert (settings.shard_index, settings.shard_count) == (index, 4)
    svc = one(objs, "Service")
    assert svc["spec"]["clusterIP"] == "None" and spec["subdomain"] == svc["metadata"]["name"]
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    t_env = env_of(container(spec, "trainer"))
    assert t_env["WORLD_SIZE"] == "4"
    assert t_env["MASTER_ADDR"] == f"{job['metadata']['name']}-0.{svc['metadata']['name']}.{NAMESPACE}.svc"
    assert {p["name"] for p in svc["spec"]["ports"]} == {"metrics", "rendezvous"}


def test_single_node_is_not_indexed(rendered: dict[str, list[dict[str, Any]]]) -> None:
    job = one(rendered["default"], "Job")
    assert job["spec"]["completionMode"] == "NonIndexed"
    spec = job["spec"]["template"]["spec"]
    assert "subdomain" not in spec
    assert env_of(container(spec, "epochfs"))["EPOCHFS_SHARD_COUNT"] == "1"


def test_cache_volume_choices(rendered: dict[str, list[dict[str, Any]]]) -> None:
    vols = {v["name"]: v for v in pod_spec(rendered["default"])["volumes"]}
    assert vols["epochfs-cache"]["emptyDir"]["sizeLimit"] == "20Gi"
    spec = pod_spec(rendered["hostpath"])
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["epochfs-cache"]["hostPath"] == {"path": "/var/lib/epochfs", "type": "DirectoryOrCreate"}
    # Two pods of one Job on one node must not share a cache folder (they sample different shards),
    # nor two releases (tests/deploy/test_helm_values_files.py).
    for name in ("epochfs", "trainer"):
        exprs = {m.get("subPathExpr") for m in container(spec, name)["volumeMounts"]
                 if m["name"] == "epochfs-cache"}
        assert exprs == {f"{NAMESPACE}/{RELEASE}/shard-$(EPOCHFS_SHARD_INDEX)"}, name
    vols = {v["name"]: v for v in pod_spec(rendered["ephemeral-pvc"])["volumes"]}
    claim = vols["epochfs-cache"]["ephemeral"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == "local-nvme"
    assert claim["resources"]["requests"]["storage"] == "100Gi"
    assert pod_spec(rendered["default"])["securityContext"]["fsGroup"] == (
        container(pod_spec(rendered["default"]), "trainer")["securityContext"]["runAsGroup"]
    )


def test_rbac_is_exactly_the_calls_the_reporter_makes(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objs = rendered["default"]
    role = one(objs, "Role")
    granted = {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
               for resource in rule["resources"] for verb in rule["verbs"]}
    assert granted == set(kube.API_CALLS)
    assert all("resourceNames" not in r and "nonResourceURLs" not in r for r in role["rules"])
    binding, sa = one(objs, "RoleBinding"), one(objs, "ServiceAccount")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"],
                                    "namespace": NAMESPACE}]
    assert sa["automountServiceAccountToken"] is False
    spec = pod_spec(objs)
    assert spec["serviceAccountName"] == sa["metadata"]["name"]
    assert spec["automountServiceAccountToken"] is False
    token_path = "/var/run/secrets/kubernetes.io/serviceaccount"
    assert mounts_of(container(spec, "epochfs"))[token_path]["readOnly"] is True
    assert token_path not in mounts_of(container(spec, "trainer"))
    # Reporting off: no Role, no token anywhere, and the sidecar is told so.
    off = rendered["monitoring-off"]
    assert not [o for o in off if o["kind"] in ("Role", "RoleBinding")]
    spec = pod_spec(off)
    assert "epochfs-kube-api-access" not in {v["name"] for v in spec["volumes"]}
    assert env_of(container(spec, "epochfs"))["EPOCHFS_KUBE_REPORTING"] == "0"


def test_metrics_service_monitor_and_dashboard(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objs = rendered["monitoring-on"]
    job = one(objs, "Job")
    ann = job["spec"]["template"]["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/port"] == "8080"
    assert ann["prometheus.io/path"] == "/metrics"
    svc = one(objs, "Service")
    metrics_port = {"name": "metrics", "port": 8080, "targetPort": 8080, "protocol": "TCP"}
    assert metrics_port in svc["spec"]["ports"]
    sm = one(objs, "ServiceMonitor")
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    endpoint = sm["spec"]["endpoints"][0]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"
    assert sm["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    assert sm["metadata"]["labels"]["release"] == "prometheus"
    cm = one(objs, "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"]["grafana_folder"] == "Training"
    shipped = json.loads((CHART / "dashboards" / "epochfs.json").read_text())
    dashboard = json.loads(cm["data"]["epochfs.json"])
    digest = hashlib.sha256(f"{NAMESPACE}/{RELEASE}".encode()).hexdigest()[:8]
    assert dashboard["uid"] == f"epochfs-{RELEASE}-{digest}"
    assert dashboard["title"] == f"epochfs ({NAMESPACE}/{RELEASE})"
    assert {**dashboard, "uid": shipped["uid"], "title": shipped["title"]} == shipped  # nothing else
    off = rendered["monitoring-off"]
    assert not [o for o in off if o["kind"] in ("Service", "ServiceMonitor", "ConfigMap")]
    assert "prometheus.io/scrape" not in one(off, "Job")["spec"]["template"]["metadata"]["annotations"]
    assert not [o for o in rendered["default"] if o["kind"] in ("ServiceMonitor", "ConfigMap")]


def test_network_policy_admits_peers_and_scrapes(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objs = rendered["default"]
    np = one(objs, "NetworkPolicy")
    pod_labels = one(objs, "Job")["spec"]["template"]["metadata"]["labels"]
    assert np["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert np["spec"]["policyTypes"] == ["Ingress"]
    rules = np["spec"]["ingress"]
    assert rules[0]["from"][0]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert rules[1] == {"ports": [{"port": 8080, "protocol": "TCP"}]}


SECRETISH = re.compile(r"(SECRET|PASSWORD|TOKEN|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.IGNORECASE)


def test_credentials_come_only_from_a_secret(rendered: dict[str, list[dict[str, Any]]]) -> None:
    spec = pod_spec(rendered["credentials-env"])
    assert container(spec, "epochfs")["envFrom"] == [{"secretRef": {"name": "s3-creds"}}]
    assert "envFrom" not in container(spec, "trainer")
    spec = pod_spec(rendered["credentials-files"])
    side = container(spec, "epochfs")
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["epochfs-remote-credentials"]["secret"]["secretName"] == "s3-creds"
    mount = mounts_of(side)["/var/run/secrets/epochfs/remote"]
    assert mount["readOnly"] is True and mount["name"] == "epochfs-remote-credentials"
    assert env_of(side)["AWS_SHARED_CREDENTIALS_FILE"] == "/var/run/secrets/epochfs/remote/credentials"
    assert "epochfs-remote-credentials" not in {m["name"] for m in container(spec, "trainer")["volumeMounts"]}
    # No literal secret anywhere: env values of secret-like names are file paths or references.
    for case, objs in rendered.items():
        for c in pod_spec(objs).get("initContainers", []) + pod_spec(objs)["containers"]:
            for e in c.get("env", []):
                if SECRETISH.search(e["name"]) and "value" in e:
                    assert e["value"].startswith("/var/run/secrets/"), (case, e)
            assert not any(SECRETISH.search(a) for a in c.get("args", [])), case
    # ... and values.yaml has no place for one.
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, f"{path}.{k}" if path else k)
        elif SECRETISH.search(path):
            assert path in ("remote.credentials.secretName", "remote.credentials.mode",
                            "remote.credentials.mountPath", "imagePullSecrets"), (
                f"values.yaml could hold a secret at {path}")

    walk(values, "")
    assert set(values["remote"]["credentials"]) == {"secretName", "mode", "mountPath", "fileEnv"}


def test_digests_pin_both_images(rendered: dict[str, list[dict[str, Any]]]) -> None:
    spec = pod_spec(rendered["digests"])
    assert container(spec, "epochfs")["image"] == "ghcr.io/epochfs/epochfs@sha256:" + "a" * 64
    assert container(spec, "trainer")["image"] == "pytorch/pytorch@sha256:" + "b" * 64


def test_helm_test_hook_asks_every_sidecar(rendered: dict[str, list[dict[str, Any]]]) -> None:
    pod = one(rendered["default"], "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    script = pod["spec"]["containers"][0]["command"][-1]
    compile(script, "helm-test", "exec")  # the test pod's Python is at least valid
    assert f"{RELEASE}-epochfs.{NAMESPACE}.svc" in script and "/readyz" in script
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True


def test_notes_say_how_to_watch_the_cache(helm_bin: Path, tmp_path: Path) -> None:
    proc = helm(helm_bin, "install", RELEASE, str(CHART), "--dry-run=client", "--namespace", NAMESPACE,
                values=with_remote({}), tmp=tmp_path)
    notes = proc.stdout.split("NOTES:", 1)[1]
    assert "epochfs status --mount /mnt/epochfs/view --watch" in notes
    assert "Trainers read /mnt/epochfs/view/epoch-N/" in notes
    assert "reason=EpochCut" in notes and "helm test" in notes


# --------------------------------------------------------------------------- legacy sidecar mode


def test_legacy_mode_uses_regular_containers(rendered: dict[str, list[dict[str, Any]]]) -> None:
    spec = pod_spec(rendered["legacy-sidecar"])
    assert "initContainers" not in spec
    assert [c["name"] for c in spec["containers"]] == ["epochfs", "trainer"]
    side, trainer = spec["containers"]
    assert "restartPolicy" not in side
    assert side["command"][:2] == ["/bin/sh", "-c"] and "epochfs sidecar" in side["command"][2]
    default_cmd = yaml.safe_load((CHART / "values.yaml").read_text())["trainer"]["command"]
    assert trainer["command"][:2] == ["/bin/sh", "-c"]
    assert trainer["command"][3:] == ["epochfs-trainer", *default_cmd]


def test_legacy_mode_needs_a_trainer_command(helm_bin: Path, tmp_path: Path) -> None:
    values = with_remote({"sidecar": {"native": False}, "trainer": {"command": []}})
    proc = helm(helm_bin, "template", RELEASE, str(CHART), values=values, tmp=tmp_path, check=False)
    assert proc.returncode != 0 and "set trainer.command" in proc.stderr


def test_older_clusters_get_the_legacy_mode(helm_bin: Path, tmp_path: Path) -> None:
    """Below 1.29 the native sidecar is refused with advice; legacy mode validates on 1.25-1.28."""
    proc = helm(helm_bin, "template", RELEASE, str(CHART), "--kube-version", "1.28.9",
                values=with_remote({}), tmp=tmp_path, check=False)
    assert proc.returncode != 0 and "set sidecar.native=false" in proc.stderr
    text = helm(helm_bin, "template", RELEASE, str(CHART), "--kube-version", "1.25.0", "-n", NAMESPACE,
                values=with_remote(MATRIX["legacy-sidecar"]), tmp=tmp_path).stdout
    for obj in (d for d in yaml.safe_load_all(text) if d):
        for version in ("1.25.0", "1.28.0"):
            kubernetes_validate.validate(obj, version, strict=True)


def stand_in(tmp_path: Path, body: Callable[[Path], str]) -> tuple[Path, Path, Path]:
    """A control folder, and a stand-in `epochfs` (a shell script of ``body(log)``) in a folder
    to put first on PATH: (control, bin folder, the log it writes)."""
    control = tmp_path / "control"
    control.mkdir()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "sidecar.log"
    fake = bindir / "epochfs"
    fake.write_text("#!/bin/sh\n" + body(log))
    fake.chmod(0o755)
    return control, bindir, log


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs /bin/sh")
def test_legacy_wrappers_wait_for_the_mount_and_stop_the_sidecar(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path,
) -> None:
    """Run the two rendered shell wrappers for real, with a stand-in `epochfs` on PATH.

    The trainer's wrapper must wait for the sidecar's ready file (its wrapper leaves it once
    /readyz answers: tests/deploy/test_helm_legacy_ready.py), keep the trainer's exit code and
    leave the exit file; the sidecar's wrapper must then SIGTERM `epochfs sidecar` and exit with
    its status (0 after a clean SIGTERM).
    """
    spec = pod_spec(rendered["legacy-sidecar"])
    side, trainer = spec["containers"]
    mount = tmp_path / "mnt"
    control, bindir, log = stand_in(tmp_path, lambda log: (
        f"echo \"started $*\" >> {log}\n"
        f"trap 'echo stopped-by-TERM >> {log}; exit 0' TERM\n"
        "while :; do sleep 0.05; done\n"))
    side_script = side["command"][2].replace("/var/run/epochfs-control", str(control))
    trainer_script = trainer["command"][2].replace("/var/run/epochfs-control", str(control))
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "EPOCHFS_MOUNT": str(mount)}
    sidecar = subprocess.Popen(["/bin/sh", "-c", side_script], env=env, start_new_session=True)
    try:
        from common import wait_until

        wait_until(lambda: log.exists() and "started sidecar" in log.read_text(), what="fake sidecar start")
        run = subprocess.Popen(["/bin/sh", "-c", trainer_script, "epochfs-trainer", "sh", "-c",
                                "echo trained > \"$0\"; exit 7", str(tmp_path / "out")], env=env)
        # The trainer waits for the sidecar: nothing has run yet, and no exit file exists.
        with pytest.raises(subprocess.TimeoutExpired):
            run.wait(timeout=1.5)
        assert not (tmp_path / "out").exists() and not (control / "trainer-exited").exists()
        (control / "ready").touch()
        assert run.wait(timeout=30) == 7  # the trainer's own exit code
        assert (tmp_path / "out").read_text() == "trained\n"
        assert (control / "trainer-exited").exists()
        assert sidecar.wait(timeout=30) == 0
        assert "stopped-by-TERM" in log.read_text()
    finally:
        if sidecar.poll() is None:
            os.killpg(sidecar.pid, signal.SIGKILL)
            sidecar.wait()


@pytest.mark.skipif(shutil.which("sh") is None, reason="needs /bin/sh")
def test_the_legacy_wrapper_sends_one_sigterm_and_waits_for_the_sidecars_exit(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path,
) -> None:
    """The pod's SIGTERM in the same moment as the trainer's exit file: the wrapper forwards one
    SIGTERM (a second makes `epochfs sidecar` kill its children and exit 143 at once, which a Job
    counts as a failed pod) and exits with the sidecar's status once it has exited, not when its
    own `wait` is interrupted by the signal. A stand-in `epochfs` counts the SIGTERMs it gets and
    takes a second to stop, as the supervisor does to unmount."""
    side = pod_spec(rendered["legacy-sidecar"])["containers"][0]
    control, bindir, log = stand_in(tmp_path, lambda log: (
        "n=0\n"
        f"trap 'n=$((n+1)); echo TERM >> {log}' TERM\n"
        f"echo started >> {log}\n"
        "while [ $n -eq 0 ]; do sleep 0.05; done\n"
        "sleep 1\n"
        "[ $n -ge 2 ] && exit 143\n"
        f"echo stopped >> {log}\n"
        "exit 0\n"))
    script = side["command"][2].replace("/var/run/epochfs-control", str(control))
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    wrapper = subprocess.Popen(["/bin/sh", "-c", script], env=env, start_new_session=True)
    try:
        from common import wait_until

        wait_until(lambda: log.exists() and "started" in log.read_text(), what="the stand-in's start")
        (control / "trainer-exited").touch()
        wait_until(lambda: "TERM" in log.read_text(), what="the exit file's SIGTERM")
        os.kill(wrapper.pid, signal.SIGTERM)  # the pod's, to the container's first process
        assert wrapper.wait(timeout=30) == 0
        assert log.read_text().split() == ["started", "TERM", "stopped"]
    finally:
        if wrapper.poll() is None:
            os.killpg(wrapper.pid, signal.SIGKILL)
            wrapper.wait()


def test_trainer_reports_to_its_own_sidecar(rendered: dict[str, list[dict[str, Any]]],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch client's report URL points at the sidecar's health port on the pod's loopback."""
    from epochfs.torchclient.report import report_url_from_env

    for case, objs in rendered.items():
        spec = pod_spec(objs)
        sidecar = container(spec, "epochfs")
        probe_port = sidecar["livenessProbe"]["httpGet"]["port"]
        port = next(p["containerPort"] for p in sidecar["ports"] if p["name"] == probe_port)
        url = env_of(container(spec, "trainer"))["EPOCHFS_REPORT_URL"]
        assert url == f"http://127.0.0.1:{port}/v1/client-report", case
        monkeypatch.setenv("EPOCHFS_REPORT_URL", url)
        assert report_url_from_env() == url, case


# --------------------------------------------------------------------------- operators' settings


def test_dashboard_uid_is_unique_per_release(helm_bin: Path, tmp_path: Path) -> None:
    """Grafana keys dashboards by uid (at most 40 characters of [A-Za-z0-9_-]): two releases, in one
    namespace or two, never share one, and a release name of 53 characters still fits."""
    values = with_remote({"dashboard": {"enabled": True}})
    uids = {}
    for release, namespace in (("mnist", "training"), ("mnist", "research"), ("imagenet", "training"),
                               ("a" * 53, "training"), ("a" * 53, "research")):
        text = helm(helm_bin, "template", release, str(CHART), "-n", namespace, "--show-only",
                    "templates/dashboard-configmap.yaml", values=values, tmp=tmp_path).stdout
        cm = yaml.safe_load(text)
        dashboard = json.loads(cm["data"]["epochfs.json"])
        assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", dashboard["uid"]), dashboard["uid"]
        assert dashboard["title"] == f"epochfs ({namespace}/{release})"
        uids[(release, namespace)] = dashboard["uid"]
    assert len(set(uids.values())) == len(uids), uids


def test_ephemeral_storage_request_follows_a_node_disk_cache(
    rendered: dict[str, list[dict[str, Any]]], helm_bin: Path, tmp_path: Path,
) -> None:
    """An emptyDir cache on node disk is requested as ephemeral storage (the scheduler then places
    the pod where the cache fits); other caches, and the user's own figures, are left alone."""
    def requests(objs: list[dict[str, Any]]) -> dict[str, Any]:
        res: dict[str, Any] = container(pod_spec(objs), "epochfs")["resources"]
        return dict(res.get("requests", {}))

    default = requests(rendered["default"])
    assert default == {"cpu": "500m", "memory": "512Mi", "ephemeral-storage": "20Gi"}
    assert requests(rendered["legacy-sidecar"])["ephemeral-storage"] == "20Gi"
    for case in ("hostpath", "ephemeral-pvc"):  # the cache is not ephemeral storage
        assert "ephemeral-storage" not in requests(rendered[case]), case
    cases: dict[str, tuple[dict[str, Any], str | None]] = {
        "memory": ({"cache": {"volume": {"medium": "Memory", "size": "1Gi"}}}, None),
        "off": ({"cache": {"volume": {"requestEphemeralStorage": False}}}, None),
        "big": ({"cache": {"volume": {"size": "1500Gi"}}}, "1500Gi"),
        "own-request": ({"sidecar": {"resources": {"requests": {"ephemeral-storage": "30Gi"}}}}, "30Gi"),
        "own-limit": ({"sidecar": {"resources": {"limits": {"ephemeral-storage": "30Gi"}}}}, None),
        "no-resources": ({"sidecar": {"resources": None}}, "20Gi"),
    }
    for case, (values, expected) in cases.items():
        objs = render(helm_bin, with_remote(values), tmp_path)
        assert requests(objs).get("ephemeral-storage") == expected, case
        kubernetes_validate.validate(one(objs, "Job"), K8S_VERSIONS[-1], strict=True)


def test_common_labels_reach_every_object(rendered: dict[str, list[dict[str, Any]]]) -> None:
    objs = rendered["kueue-extras"]
    common = {"team": "vision", "cost-center": "ml-42"}
    assert {o["kind"] for o in objs} >= {"Job", "ServiceAccount", "Role", "RoleBinding", "Service",
                                         "NetworkPolicy", "ConfigMap", "Pod"}
    for obj in objs:
        assert common.items() <= obj["metadata"]["labels"].items(), obj["kind"]
        # commonLabels add; they never replace the chart's own (selectors rely on them).
        assert obj["metadata"]["labels"]["app.kubernetes.io/name"] == "epochfs", obj["kind"]
    job = one(objs, "Job")
    assert common.items() <= job["spec"]["template"]["metadata"]["labels"].items()
    claim = {v["name"]: v for v in pod_spec(objs)["volumes"]}["epochfs-cache"]["ephemeral"]
    assert common.items() <= claim["volumeClaimTemplate"]["metadata"]["labels"].items()
    # Selectors still select the pods.
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    assert one(objs, "Service")["spec"]["selector"].items() <= pod_labels.items()
    assert one(objs, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()


def test_common_labels_cannot_replace_the_selector_labels(helm_bin: Path, tmp_path: Path) -> None:
    objs = render(helm_bin, with_remote({"commonLabels": {"app.kubernetes.io/name": "other",
                                                           "app.kubernetes.io/instance": "x"}}), tmp_path)
    for obj in objs:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "epochfs"
        assert labels["app.kubernetes.io/instance"] == RELEASE
    labels = one(objs, "Job")["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "epochfs"


def test_job_labels_annotations_and_scheduler_for_kueue(rendered: dict[str, list[dict[str, Any]]]) -> None:
    """Kueue admits a Job by the queue-name label on the Job object itself (not its pods)."""
    job = one(rendered["kueue-extras"], "Job")
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert job["metadata"]["annotations"] == {"example.com/owner": "vision"}
    assert "kueue.x-k8s.io/queue-name" not in job["spec"]["template"]["metadata"]["labels"]
    assert job["spec"]["template"]["spec"]["schedulerName"] == "volcano"
    default = one(rendered["default"], "Job")
    assert "annotations" not in default["metadata"]
    assert "schedulerName" not in default["spec"]["template"]["spec"]
    assert not [o for o in rendered["kueue-extras"] if o["kind"] != "Job"
                and "kueue.x-k8s.io/queue-name" in o["metadata"]["labels"]]


def test_trainer_extra_volumes_for_checkpoints(rendered: dict[str, list[dict[str, Any]]]) -> None:
    spec = pod_spec(rendered["kueue-extras"])
    vols = {v["name"]: v for v in spec["volumes"]}
    assert vols["checkpoints"] == {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "ckpt"}}
    mount = mounts_of(container(spec, "trainer"))["/checkpoints"]
    assert mount == {"name": "checkpoints", "mountPath": "/checkpoints"}
    assert "checkpoints" not in {m["name"] for m in container(spec, "epochfs")["volumeMounts"]}


@pytest.mark.parametrize(
    ("trainer", "message"),
    [
        ({"extraVolumes": [{"name": "epochfs-cache", "emptyDir": {}}]},
         '"epochfs-cache" is a volume of the chart'),
        ({"extraVolumes": [{"name": "dshm", "emptyDir": {}}]}, '"dshm" is a volume of the chart'),
        ({"extraVolumes": [{"name": "c", "emptyDir": {}}],
          "extraVolumeMounts": [{"name": "c", "mountPath": "/mnt/epochfs"}]},
         "/mnt/epochfs is a mount path of the chart"),
        ({"extraVolumes": [{"name": "c", "emptyDir": {}}],
          "extraVolumeMounts": [{"name": "c", "mountPath": "/tmp/"}]}, "/tmp/ is a mount path of the chart"),
        ({"extraVolumeMounts": [{"name": "nowhere", "mountPath": "/x"}]}, '"nowhere" names no volume'),
        # Nested with the trainer's read-only view or cache mount, under or above it.
        ({"extraVolumes": [{"name": "c", "emptyDir": {}}],
          "extraVolumeMounts": [{"name": "c", "mountPath": "/mnt/epochfs/view/extra"}]},
         "/mnt/epochfs/view/extra is nested with /mnt/epochfs"),
        ({"extraVolumes": [{"name": "c", "emptyDir": {}}],
          "extraVolumeMounts": [{"name": "c", "mountPath": "/mnt"}]}, "/mnt is nested with /mnt/epochfs"),
        ({"extraVolumes": [{"name": "c", "emptyDir": {}}],
          "extraVolumeMounts": [{"name": "c", "mountPath": "/var/cache/"}]},
         "/var/cache/ is nested with /var/cache/epochfs-ro"),
    ],
)
def test_extra_volumes_may_not_clash_with_the_chart(helm_bin: Path, tmp_path: Path,
                                                    trainer: dict[str, Any], message: str) -> None:
    proc = helm(helm_bin, "template", RELEASE, str(CHART), values=with_remote({"trainer": trainer}),
                tmp=tmp_path, check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


# --------------------------------------------------------------------------- job.enabled=false


@pytest.mark.parametrize("nodes", [1, 3])
def test_without_the_job_only_shared_objects_render(helm_bin: Path, tmp_path: Path, nodes: int) -> None:
    """job.enabled=false: no Job (and no remote needed), no NetworkPolicy over pods the chart does
    not own, a metrics Service without the Job's rendezvous port; every object still valid."""
    values = {"job": {"enabled": False}, "nodes": nodes, "dashboard": {"enabled": True},
              "metrics": {"serviceMonitor": {"enabled": True}}, "commonLabels": {"team": "vision"}}
    objs = render(helm_bin, values, tmp_path)  # no remote.url: nothing here needs it
    kinds = sorted(o["kind"] for o in objs)
    assert kinds == ["ConfigMap", "Pod", "Role", "RoleBinding", "Service", "ServiceAccount", "ServiceMonitor"]
    for obj in objs:
        if not obj["apiVersion"].startswith(CRD_GROUPS):
            kubernetes_validate.validate(obj, K8S_VERSIONS[-1], strict=True)
        assert obj["metadata"]["labels"]["team"] == "vision"
    svc = one(objs, "Service")
    assert [p["name"] for p in svc["spec"]["ports"]] == ["metrics"]
    assert svc["spec"]["selector"] == {"app.kubernetes.io/name": "epochfs",
                                       "app.kubernetes.io/instance": RELEASE,
                                       "app.kubernetes.io/component": "training"}
    assert one(objs, "Pod")["metadata"]["annotations"]["helm.sh/hook"] == "test"
    # Metrics and the test hook off: the ServiceAccount and the Role are all that is left.
    values = {"job": {"enabled": False}, "metrics": {"enabled": False}, "tests": {"enabled": False}}
    kinds = sorted(o["kind"] for o in render(helm_bin, values, tmp_path))
    assert kinds == ["Role", "RoleBinding", "ServiceAccount"]


def test_without_the_job_notes_say_how_to_attach(helm_bin: Path, tmp_path: Path) -> None:
    proc = helm(helm_bin, "install", RELEASE, str(CHART), "--dry-run=client", "--namespace", NAMESPACE,
                values={"job": {"enabled": False}}, tmp=tmp_path)
    notes = proc.stdout.split("NOTES:", 1)[1]
    assert "job.enabled=false" in notes and "no training Job" in notes
    for template in ("epochfs.sidecarContainer", "epochfs.volumes", "epochfs.trainerVolumeMounts",
                     "epochfs.trainerEnv", "epochfs.podLabels"):
        assert template in notes
    assert "/mnt/epochfs/view/epoch-N/" in notes and "job/" not in notes
