"""The chart with ``sidecar.view: folder``: every pod it renders passes the Restricted Pod Security
Standard (tests/pss.py), the chart's own Job in the usual matrix of values and the example parent
chart's Pod, PyTorchJob and JobSet alike, and the pod is wired for the folder view.

The checker is shown to fail: on the FUSE view's pod (privileged), and on the folder pod with one
control broken at a time.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
from helm_helpers import (
    MATRIX,
    as_pod,
    container,
    env_of,
    helm,
    mounts_of,
    pod_spec,
    render,
    render_example,
    with_remote,
)
from pss import pods_in, violations

from epochfs.sidecar import config

FOLDER = {"sidecar": {"view": "folder"}}
# The chart's matrix, but for hostPath (Baseline and Restricted forbid it; the chart refuses it).
CASES = {name: values for name, values in MATRIX.items() if name != "hostpath"}


def merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        out[key] = merged(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


@pytest.fixture(scope="module")
def folder_renders(helm_bin: Path,
                   tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("folder")
    return {name: render(helm_bin, with_remote(merged(values, FOLDER)), tmp)
            for name, values in CASES.items()}


def every_pod(objs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    found = [(f"{o['kind']}/{o['metadata']['name']}:{where}", meta, spec)
             for o in objs for where, meta, spec in pods_in(o)]
    assert found, "no pod rendered"
    return found


def test_every_rendered_pod_passes_restricted(folder_renders: dict[str, list[dict[str, Any]]]) -> None:
    for case, objs in folder_renders.items():
        pods = every_pod(objs)
        for where, meta, spec in pods:
            assert violations(spec, meta) == [], (case, where)
        kinds = sorted(where.split("/")[0] for where, _, _ in pods)
        # The Job's pod, and the helm test's Pod where metrics (and so the test) are on.
        assert kinds == (["Job", "Pod"] if any(o["kind"] == "Service" for o in objs) else ["Job"]), case


@pytest.mark.parametrize("workload,nodes", [("pod", 1), ("pytorchjob", 3), ("jobset", 2)])
def test_example_workloads_pass_restricted(helm_bin: Path, tmp_path: Path, workload: str, nodes: int) -> None:
    objs = render_example(helm_bin, workload, merged({"nodes": nodes}, FOLDER), tmp_path)
    pods = every_pod(objs)
    for where, meta, spec in pods:
        assert violations(spec, meta) == [], where
    with_sidecar = [where for where, _, spec in pods
                    if "epochfs" in {c["name"] for c in spec.get("initContainers", []) + spec["containers"]}]
    assert with_sidecar, [where for where, _, _ in pods]


def test_the_fuse_views_pod_fails_restricted(helm_bin: Path, tmp_path: Path) -> None:
    """The checker can fail: the FUSE view's sidecar is privileged, root, with Bidirectional."""
    spec = pod_spec(render(helm_bin, with_remote({}), tmp_path))
    found = violations(spec)
    assert "container epochfs: privileged" in found
    assert "container epochfs: runAsUser 0" in found
    assert "container epochfs: allowPrivilegeEscalation is not false" in found
    assert "container epochfs: capabilities do not drop ALL" in found
    assert "container epochfs: runAsNonRoot is not true" in found
    assert not [v for v in found if "trainer" in v]  # the trainer is Restricted in both views


def _sidecar_sc(spec: dict[str, Any]) -> dict[str, Any]:
    sc: dict[str, Any] = spec["initContainers"][0]["securityContext"]
    return sc


BREAKS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "privileged": (lambda s: _sidecar_sc(s).update(privileged=True), "privileged"),
    "escalation": (lambda s: _sidecar_sc(s).update(allowPrivilegeEscalation=True),
                   "allowPrivilegeEscalation"),
    "root user": (lambda s: _sidecar_sc(s).update(runAsUser=0), "runAsUser 0"),
    "non-root off": (lambda s: _sidecar_sc(s).update(runAsNonRoot=False), "runAsNonRoot"),
    "added capability": (lambda s: _sidecar_sc(s)["capabilities"].update(add=["SYS_ADMIN"]), "SYS_ADMIN"),
    "added baseline capability": (lambda s: _sidecar_sc(s)["capabilities"].update(add=["CHOWN"]), "CHOWN"),
    "drop not all": (lambda s: _sidecar_sc(s)["capabilities"].update(drop=["NET_RAW"]), "drop ALL"),
    "seccomp unconfined": (lambda s: _sidecar_sc(s).update(seccompProfile={"type": "Unconfined"}),
                           "seccompProfile Unconfined"),
    "no seccomp anywhere": (lambda s: (s["securityContext"].pop("seccompProfile"),
                                       _sidecar_sc(s).pop("seccompProfile"),
                                       s["containers"][0]["securityContext"].pop("seccompProfile")),
                            "no seccompProfile"),
    "hostPath": (lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/var"}}), "hostPath"),
    "nfs volume": (lambda s: s["volumes"].append({"name": "n", "nfs": {"server": "x", "path": "/"}}),
                   "type nfs"),
    "hostNetwork": (lambda s: s.update(hostNetwork=True), "hostNetwork"),
    "hostPID": (lambda s: s.update(hostPID=True), "hostPID"),
    "hostIPC": (lambda s: s.update(hostIPC=True), "hostIPC"),
    "hostPort": (lambda s: s["initContainers"][0]["ports"][0].update(hostPort=8080), "hostPort"),
    "procMount": (lambda s: _sidecar_sc(s).update(procMount="Unmasked"), "procMount"),
    "sysctl": (lambda s: s["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}]),
               "sysctl kernel.msgmax"),
    "apparmor": (lambda s: _sidecar_sc(s).update(appArmorProfile={"type": "Unconfined"}), "appArmorProfile"),
    "selinux type": (lambda s: _sidecar_sc(s).update(seLinuxOptions={"type": "spc_t"}),
                     "seLinuxOptions.type"),
    "selinux user": (lambda s: _sidecar_sc(s).update(seLinuxOptions={"user": "system_u"}),
                     "seLinuxOptions.user"),
    "hostProcess": (lambda s: _sidecar_sc(s).update(windowsOptions={"hostProcess": True}), "hostProcess"),
}


@pytest.mark.parametrize("name", sorted(BREAKS))
def test_each_restricted_control_can_fail(folder_renders: dict[str, list[dict[str, Any]]], name: str) -> None:
    spec = copy.deepcopy(pod_spec(folder_renders["default"]))
    assert violations(spec) == []
    breaker, expected = BREAKS[name]
    breaker(spec)
    found = violations(spec)
    assert any(expected in v for v in found), found


def test_an_apparmor_annotation_unconfined_fails(folder_renders: dict[str, list[dict[str, Any]]]) -> None:
    spec = pod_spec(folder_renders["default"])
    meta = {"annotations": {"container.apparmor.security.beta.kubernetes.io/epochfs": "unconfined"}}
    assert violations(spec, meta) == ["annotation container.apparmor.security.beta.kubernetes.io/epochfs: "
                                      "AppArmor unconfined"]
    meta["annotations"]["container.apparmor.security.beta.kubernetes.io/epochfs"] = "runtime/default"
    assert violations(spec, meta) == []


def test_the_folder_pod_is_wired_for_the_folder_view(folder_renders: dict[str, list[dict[str, Any]]]) -> None:
    for case, objs in folder_renders.items():
        spec = pod_spec(objs)
        side, trainer = container(spec, "epochfs"), container(spec, "trainer")
        s_env, t_env = env_of(side), env_of(trainer)
        assert s_env["EPOCHFS_VIEW"] == "folder", case
        assert s_env["EPOCHFS_MOUNT"] == t_env["EPOCHFS_MOUNT"] == "/mnt/epochfs/view", case
        # No mount propagation at all: the view is plain files on the shared volume, read-only
        # for the trainer; the link root is the cache's read-only mount, the same in both.
        for c in (side, trainer):
            assert not [m for m in c["volumeMounts"] if "mountPropagation" in m], (case, c["name"])
        s_mounts, t_mounts = mounts_of(side), mounts_of(trainer)
        assert not s_mounts["/mnt/epochfs"].get("readOnly") and t_mounts["/mnt/epochfs"]["readOnly"], case
        ro = str(Path(s_env["EPOCHFS_LINK_ROOT"]).parent)
        assert s_mounts[ro]["readOnly"] and t_mounts[ro]["readOnly"], case
        assert t_env["EPOCHFS_CACHE"] == ro, case
        # Entries are real symlinks on the volume: a target (link root + "/ab/" + 32 hex) under
        # 60 bytes stays in the inode on ext4 instead of taking a 4 KiB block.
        assert len(s_env["EPOCHFS_LINK_ROOT"]) + 36 < 60, case
        sc = side["securityContext"]
        assert sc["runAsUser"] == 10001 and sc["readOnlyRootFilesystem"] is True, case
        # The settings the sidecar parses from its environment: the folder view.
        env = {e["name"]: e.get("value", "0") for e in side["env"]}
        settings = config.parse(config.SidecarSettings, [], environ=env)
        assert settings.view == "folder" and settings.mount == Path("/mnt/epochfs/view"), case
        # The pod validates strictly as Kubernetes sees it.
        kubernetes_validate.validate(as_pod({"metadata": {}, "spec": spec}, "p"), "1.29.0", strict=True)


def test_own_user_and_read_only_path_and_the_fuse_defaults_unchanged(helm_bin: Path, tmp_path: Path) -> None:
    spec = pod_spec(render(helm_bin, with_remote(merged(FOLDER, {"sidecar": {"runAsUser": 4242}})), tmp_path))
    assert container(spec, "epochfs")["securityContext"]["runAsUser"] == 4242
    assert violations(spec) == []
    fuse = container(pod_spec(render(helm_bin, with_remote({}), tmp_path)), "epochfs")
    assert fuse["securityContext"]["runAsUser"] == 0 and "EPOCHFS_VIEW" not in env_of(fuse)
    assert env_of(fuse)["EPOCHFS_LINK_ROOT"] == "/var/cache/epochfs-ro/objects"
    own_path = merged(FOLDER, {"cache": {"readOnlyPath": "/ro/"}})
    own = pod_spec(render(helm_bin, with_remote(own_path), tmp_path))
    assert env_of(container(own, "epochfs"))["EPOCHFS_LINK_ROOT"] == "/ro/objects"
    assert "/ro" in mounts_of(container(own, "trainer"))


@pytest.mark.parametrize("values,message", [
    ({"cache": {"volume": {"type": "hostPath"}}}, "forbid hostPath volumes"),
    ({"sidecar": {"runAsUser": 0}}, "runs the sidecar as a non-root user"),
])
def test_what_restricted_cannot_have_is_refused(helm_bin: Path, tmp_path: Path, values: dict[str, Any],
                                                message: str) -> None:
    proc = helm(helm_bin, "template", "r", str(Path(__file__).resolve().parents[2] / "helm" / "epochfs"),
                values=with_remote(merged(FOLDER, values)), tmp=tmp_path, check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr


def test_an_unknown_view_is_refused_by_the_schema(helm_bin: Path, tmp_path: Path) -> None:
    proc = helm(helm_bin, "template", "r", str(Path(__file__).resolve().parents[2] / "helm" / "epochfs"),
                values=with_remote({"sidecar": {"view": "nfs"}}), tmp=tmp_path, check=False)
    assert proc.returncode != 0 and "/sidecar/view" in proc.stderr, proc.stderr
