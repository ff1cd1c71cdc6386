"""The chart with values as operators give them, in values files rendered by the real helm.

A values file is not `--set`: Helm reads its YAML numbers as float64, which `quote` or a bare
``{{ }}`` prints as ``1e+06`` (the sidecar then refuses ``EPOCHFS_SEED``, the API server an
``activeDeadlineSeconds``), so the integer cases use the chart's own ci/large-integers-values.yaml.
Also here: each release's hostPath cache folder (a node folder outlives the pod, and the sampler
refuses a cache another release filled) and the schema's bound on ``sidecar.concurrency``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from helm_helpers import CHART, NAMESPACE, RELEASE, container, env_of, helm, one, pod_spec, with_remote

from epochfs.sidecar import config

LARGE = CHART / "ci" / "large-integers-values.yaml"
SCIENTIFIC = re.compile(r"\d[eE][+-]?\d")
K8S_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())


def objects(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def render_file(helm_bin: Path, values_file: Path, tmp: Path, release: str = RELEASE,
                namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """`helm template` with one values file, exactly as an operator runs it."""
    return objects(helm(helm_bin, "template", release, str(CHART), "--namespace", namespace,
                        "-f", str(values_file), tmp=tmp).stdout)


def every_env_value(spec: dict[str, Any]) -> dict[str, str]:
    """(container/name) -> value of every plain env value in the pod."""
    return {f"{c['name']}/{e['name']}": e["value"]
            for c in spec.get("initContainers", []) + spec["containers"]
            for e in c.get("env", []) if "value" in e}


# ------------------------------------------------------------------------ whole numbers from a file


def test_large_integers_from_a_values_file_render_as_integers(helm_bin: Path, tmp_path: Path) -> None:
    values = yaml.safe_load(LARGE.read_text())
    assert values["sidecar"]["seed"] > 10**10 and values["sidecar"]["minSamples"] >= 10**6  # the case
    objs = render_file(helm_bin, LARGE, tmp_path)
    spec = pod_spec(objs)
    envs = every_env_value(spec)
    assert not {k: v for k, v in envs.items() if SCIENTIFIC.search(v)}
    sidecar = env_of(container(spec, "epochfs"))
    assert {k: sidecar[k] for k in ("EPOCHFS_SEED", "EPOCHFS_MIN_SAMPLES", "EPOCHFS_KEEP_EPOCHS",
                                    "EPOCHFS_CONCURRENCY", "EPOCHFS_SHARD_COUNT", "EPOCHFS_HEALTH_PORT",
                                    "EPOCHFS_KUBE_STATUS_INTERVAL", "EPOCHFS_KUBE_ERROR_THRESHOLD")} == {
        "EPOCHFS_SEED": "20240917123", "EPOCHFS_MIN_SAMPLES": "1000000", "EPOCHFS_KEEP_EPOCHS": "1000000",
        "EPOCHFS_CONCURRENCY": "1024", "EPOCHFS_SHARD_COUNT": "2", "EPOCHFS_HEALTH_PORT": "8080",
        "EPOCHFS_KUBE_STATUS_INTERVAL": "1000000", "EPOCHFS_KUBE_ERROR_THRESHOLD": "1000000",
    }
    trainer = env_of(container(spec, "trainer"))
    assert (trainer["WORLD_SIZE"], trainer["MASTER_PORT"]) == ("2", "29500")
    # The fields the API server reads as integers, and the sidecar's uid.
    job = one(objs, "Job")
    assert (job["spec"]["backoffLimit"], job["spec"]["ttlSecondsAfterFinished"],
            job["spec"]["activeDeadlineSeconds"], spec["terminationGracePeriodSeconds"]) == (
        1000000, 2592000, 2592000, 1000000)
    assert container(spec, "epochfs")["securityContext"]["runAsUser"] == 1000680000
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(job, version, strict=True)


def test_the_sidecar_accepts_what_a_values_file_renders(helm_bin: Path, tmp_path: Path) -> None:
    """`epochfs sidecar` parses the rendered env (the pod would crash-loop on `1e+06`)."""
    spec = pod_spec(render_file(helm_bin, LARGE, tmp_path))
    env = {e["name"]: e.get("value", "from-downward-api") for e in container(spec, "epochfs")["env"]}
    env["EPOCHFS_SHARD_INDEX"] = "1"
    settings = config.parse(config.SidecarSettings, [], environ=env)
    assert (settings.seed, settings.min_samples, settings.keep_epochs) == (20240917123, 1000000, 1000000)
    assert settings.concurrency == 1024


# ------------------------------------------------------------------------------ hostPath folders


def cache_folders(objs: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(node folder, subPathExpr) of every mount of the cache volume in the Job's pod."""
    spec = pod_spec(objs)
    [vol] = [v for v in spec["volumes"] if v["name"] == "epochfs-cache"]
    return {(vol["hostPath"]["path"], m.get("subPathExpr", ""))
            for c in spec.get("initContainers", []) + spec["containers"]
            for m in c.get("volumeMounts", []) if m["name"] == "epochfs-cache"}


def hostpath_file(tmp: Path, name: str, url: str, **hostpath: str) -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(with_remote({
        "remote": {"url": url}, "nodes": 2,
        "cache": {"volume": {"type": "hostPath", "hostPath": hostpath}}})))
    return path


def test_each_release_has_its_own_hostpath_folder(helm_bin: Path, tmp_path: Path) -> None:
    alpha = render_file(helm_bin, hostpath_file(tmp_path, "a", "s3://b/alpha"), tmp_path, release="alpha")
    beta = render_file(helm_bin, hostpath_file(tmp_path, "b", "s3://b/beta"), tmp_path, release="beta")
    other_ns = render_file(helm_bin, hostpath_file(tmp_path, "a", "s3://b/alpha2"), tmp_path,
                           release="alpha", namespace="team-b")
    shard = "shard-$(EPOCHFS_SHARD_INDEX)"
    assert cache_folders(alpha) == {("/var/lib/epochfs", f"{NAMESPACE}/alpha/{shard}")}
    assert cache_folders(beta) == {("/var/lib/epochfs", f"{NAMESPACE}/beta/{shard}")}
    assert cache_folders(other_ns) == {("/var/lib/epochfs", f"team-b/alpha/{shard}")}


def test_a_shared_hostpath_folder_is_an_explicit_choice(helm_bin: Path, tmp_path: Path) -> None:
    shared = {"path": "/data/epochfs", "subPath": "imagenet-warm"}
    first = render_file(helm_bin, hostpath_file(tmp_path, "a", "s3://b/in", **shared), tmp_path, release="r1")
    second = render_file(helm_bin, hostpath_file(tmp_path, "b", "s3://b/in", **shared), tmp_path,
                         release="r2", namespace="elsewhere")
    assert cache_folders(first) == cache_folders(second) == {
        ("/data/epochfs", "imagenet-warm/shard-$(EPOCHFS_SHARD_INDEX)")}


@pytest.mark.parametrize("sub_path", ["/abs", "../up", "a/../b", "a//b", "./a", "a b", "$(POD_NAME)"])
def test_a_sub_folder_outside_the_node_folder_is_refused(helm_bin: Path, tmp_path: Path,
                                                         sub_path: str) -> None:
    cache = {"volume": {"type": "hostPath", "hostPath": {"subPath": sub_path}}}
    proc = helm(helm_bin, "template", RELEASE, str(CHART), tmp=tmp_path, check=False,
                values=with_remote({"cache": cache}))
    assert proc.returncode != 0
    assert "schema" in proc.stderr.lower() and "at '/cache/volume/hostPath/subPath'" in proc.stderr
    assert "additional properties" not in proc.stderr.lower()  # a declared key with a wrong value


def test_a_webhook_profile_sets_its_own_hostpath_folder(helm_bin: Path, tmp_path: Path) -> None:
    values = with_remote({"cache": {"volume": {"type": "hostPath"}}, "webhook": {
        "enabled": True, "profiles": {"vision": {"remote": {"url": "s3://b/vision"}},
                                      "audio": {"remote": {"url": "s3://b/audio"},
                                                "cache": {"volume": {"hostPath": {"subPath": "audio"}}}}}}})
    objs = objects(helm(helm_bin, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                        values=values, tmp=tmp_path).stdout)
    [cm] = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-profiles")]
    exprs = {}
    for key, doc in cm["data"].items():
        mounts = [m for c in json.loads(doc)["sidecarContainers"] for m in c["volumeMounts"]]
        exprs[key] = {m["subPathExpr"] for m in mounts if m["name"] == "epochfs-cache"}
    shard = "shard-$(EPOCHFS_SHARD_INDEX)"
    assert exprs == {"default.json": {f"{NAMESPACE}/{RELEASE}/{shard}"},
                     "vision.json": {f"{NAMESPACE}/{RELEASE}/{shard}"},  # the release's, as the docs say
                     "audio.json": {f"audio/{shard}"}}


# ------------------------------------------------------------------------------ concurrency bound


@pytest.mark.parametrize("command", ["lint", "template"])
def test_concurrency_over_1024_is_refused_by_the_schema(helm_bin: Path, tmp_path: Path, command: str) -> None:
    path = tmp_path / "threads.yaml"
    path.write_text(yaml.safe_dump(with_remote({"sidecar": {"concurrency": 4096}})))
    args = ["lint", "--strict"] if command == "lint" else ["template", RELEASE]
    proc = helm(helm_bin, *args, str(CHART), "-f", str(path), tmp=tmp_path, check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "schema" in out.lower() and "at '/sidecar/concurrency': maximum" in out, out
    assert re.search(r"want 1,?024", out), out
