"""The container test's pod runner and runc wrapper, without a Docker engine.

Why: `make test-container` trusts tests/container_pod.py to run a pod as the kubelet would and
scripts/runc-wrapper to drop only what the machine cannot grant; these are the rules they rest on
($(VAR) expansion, downward API, envFrom, users, the docker flags of the chart's own pod, the
Job's pods, the capability filter), checked here in the ordinary suite so a regression shows
without the engine.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from container_pod import docker_run_args, job_pods
from helm_helpers import ROOT, container, helm_binary, one, render, with_remote
from pod_env import PodError, PodIdentity, PodObjects, container_env, expand, quantity
from pod_volumes import HostVolume, PodVolumes


def _wrapper() -> ModuleType:
    path = str(ROOT / "scripts" / "runc-wrapper")
    loader = importlib.machinery.SourceFileLoader("runc_wrapper", path)
    spec = importlib.util.spec_from_loader("runc_wrapper", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.mark.parametrize(("text", "expanded"), [
    ("$(A)-$(B)", "1-2"),
    ("$$(A)", "$(A)"),             # escaped
    ("$(MISSING) x", "$(MISSING) x"),  # undefined stays as written
    ("a$b $", "a$b $"),            # a $ that starts no reference
    ("$(A", "$(A"),                # incomplete reference
    ("$(A)$(A)", "11"),
])
def test_expand_follows_the_kubelet(text: str, expanded: str) -> None:
    assert expand(text, {"A": "1", "B": "2"}) == expanded


def test_quantities() -> None:
    assert quantity("2Gi") == 2 * 2**30 and quantity("500m") == 0.5 and quantity("1e3") == 1000
    with pytest.raises(PodError):
        quantity("2 gigs")


def test_env_envfrom_first_then_env_in_order_with_downward_api() -> None:
    c = {
        "name": "x",
        "envFrom": [{"secretRef": {"name": "creds"}}, {"configMapRef": {"name": "cm"}, "prefix": "CM_"}],
        "env": [
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "INDEX", "valueFrom": {"fieldRef": {
                "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}},
            {"name": "PATHISH", "value": "/data/$(POD)/$(LATER)/$(KEY)"},
            {"name": "LATER", "value": "late"},
            {"name": "MEM",
             "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
            {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": True}}},
        ],
        "resources": {"limits": {"memory": "2Gi"}},
    }
    identity = PodIdentity(name="p-1", annotations={"batch.kubernetes.io/job-completion-index": "3"})
    objects = PodObjects(secrets={"creds": {"KEY": "s3cr3t", "bad-name!": "x"}},
                         config_maps={"cm": {"A": "b"}})
    env = container_env(c, {}, identity, objects)
    assert env == {"KEY": "s3cr3t", "CM_A": "b", "POD": "p-1", "INDEX": "3",
                   "PATHISH": "/data/p-1/$(LATER)/s3cr3t", "LATER": "late", "MEM": "2048"}
    with pytest.raises(PodError):
        container_env({"name": "x", "envFrom": [{"secretRef": {"name": "missing"}}]}, {}, identity, objects)


@pytest.fixture(scope="module")
def chart_pods(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[dict[str, Any], Any]]]:
    tmp = tmp_path_factory.mktemp("render")
    out = {}
    for name, values in {"native": {}, "legacy": {"sidecar": {"native": False}}, "two": {"nodes": 2}}.items():
        out[name] = job_pods(one(render(helm_binary(), with_remote(values), tmp), "Job"))
    return out


def _volumes(spec: dict[str, Any], identity: PodIdentity, root: Path) -> PodVolumes:
    """The pod's volumes as folders, without the mounts (no root needed)."""
    vols = PodVolumes(root, spec, identity, PodObjects(), root / "node")
    for v in spec["volumes"]:
        (root / v["name"]).mkdir(parents=True)
        vols.volumes[v["name"]] = HostVolume(v["name"], root / v["name"])
    return vols


def _flags(args: list[str], flag: str) -> list[str]:
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == flag]


def test_the_charts_pod_becomes_these_docker_runs(chart_pods: dict[str, Any], tmp_path: Path) -> None:
    [(spec, identity)] = chart_pods["native"]
    vols = _volumes(spec, identity, tmp_path)
    side, trainer = container(spec, "epochfs"), container(spec, "trainer")
    side_env = container_env(side, spec, identity, PodObjects())
    s = docker_run_args(side, spec, identity, vols, side_env, image_user="10001:10001", container_name="s")
    assert "--privileged" in s and _flags(s, "--runtime") == ["epochfs-runc"] and _flags(s, "--user") == ["0"]
    assert "--read-only" in s and _flags(s, "--network") == ["host"] and _flags(s, "--group-add") == ["10001"]
    mounts = {m.split("target=")[1].split(",")[0]: m for m in _flags(s, "--mount")}
    mount_path = os.path.dirname(side_env["EPOCHFS_MOUNT"])
    assert "bind-propagation=rshared" in mounts[mount_path] and "readonly" not in mounts[mount_path]
    assert mounts[side_env["EPOCHFS_LINK_ROOT"].rsplit("/", 1)[0]].endswith(",readonly")
    t_env = container_env(trainer, spec, identity, PodObjects())
    t = docker_run_args(trainer, spec, identity, vols, t_env, image_user="", container_name="t")
    assert "--privileged" not in t and _flags(t, "--user") == ["10001:10001"] and "--read-only" in t
    assert _flags(t, "--cap-drop") == ["ALL"] and "no-new-privileges" in _flags(t, "--security-opt")
    tmounts = {m.split("target=")[1].split(",")[0]: m for m in _flags(t, "--mount")}
    assert "bind-propagation=rslave" in tmounts[mount_path] and tmounts[mount_path].endswith(",readonly")
    assert f"source={tmp_path}/" in tmounts["/tmp"] and tmounts["/tmp"].split(",")[1].endswith("/trainer")
    entry = t.index("--entrypoint")
    assert t[entry + 1] == trainer["command"][0] and t[entry + 2] == trainer["image"]


def test_legacy_pod_runs_the_sidecar_as_a_regular_container(chart_pods: dict[str, Any]) -> None:
    [(spec, _identity)] = chart_pods["legacy"]
    assert not [c for c in spec.get("initContainers", []) if c.get("restartPolicy") == "Always"]
    assert [c["name"] for c in spec["containers"]] == ["epochfs", "trainer"]


def test_an_indexed_job_gives_one_pod_per_index(chart_pods: dict[str, Any]) -> None:
    pods = chart_pods["two"]
    assert [p[1].annotations["batch.kubernetes.io/job-completion-index"] for p in pods] == ["0", "1"]
    shards = [container_env(container(spec, "epochfs"), spec, ident, PodObjects())["EPOCHFS_SHARD_INDEX"]
              for spec, ident in pods]
    assert shards == ["0", "1"]


def test_run_as_non_root_is_enforced(chart_pods: dict[str, Any], tmp_path: Path) -> None:
    [(spec, identity)] = chart_pods["native"]
    trainer = container(spec, "trainer")
    trainer["securityContext"] = {"runAsNonRoot": True}
    with pytest.raises(PodError, match="root"):
        docker_run_args(trainer, spec, identity, _volumes(spec, identity, tmp_path), {}, image_user="0",
                        container_name="t")
    trainer["securityContext"] = {}
    trainer["lifecycle"] = {"preStop": {"exec": {"command": ["true"]}}}  # not emulated: refused
    with pytest.raises(PodError, match="lifecycle"):
        docker_run_args(trainer, spec, identity, _volumes(spec, identity, tmp_path / "2"), {},
                        image_user="", container_name="t")


def test_runc_wrapper_removes_only_capabilities_outside_the_bounding_set(tmp_path: Path) -> None:
    wrapper = _wrapper()
    caps = ["CAP_CHOWN", "CAP_SYS_ADMIN", "CAP_SYS_RESOURCE", "CAP_FUTURE_THING"]
    config = {"process": {"capabilities": {k: list(caps) for k in
                                          ("bounding", "effective", "inheritable", "permitted", "ambient")}}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    removed = wrapper.strip_capabilities(str(path), {"CAP_CHOWN", "CAP_SYS_ADMIN"})
    assert removed == ["CAP_SYS_RESOURCE"]
    after = json.loads(path.read_text())["process"]["capabilities"]
    assert all(v == ["CAP_CHOWN", "CAP_SYS_ADMIN", "CAP_FUTURE_THING"] for v in after.values())
    assert wrapper.subcommand(["--root", "/r", "--log", "create", "--log-format", "json", "create",
                               "--bundle", "/b", "id"]) == "create"
    assert wrapper.option(["create", "--bundle=/b", "id"], "--bundle", "-b") == "/b"
    assert "CAP_CHOWN" in wrapper.bounding_set()
