"""Values the chart dropped in silence or rendered into a broken pod (review C53, F2-F8), now
refused at render with the value to set, or accepted and passed on as given; each rendered by
the real helm binary:

* F2 ``remote.credentials.fileEnv`` outside files mode or without a Secret, and files mode with
  no ``fileEnv`` (the Secret mounted, nothing pointing at it);
* F3 a ``fileEnv`` variable the chart sets itself (it came after the chart's and won);
* F4 an env entry's non-string ``value`` (an EnvVar the API server refuses);
* F5 an empty ``trainer.image.tag`` without a digest (``image: pytorch/pytorch:``);
* F6 ``--set sidecar.cutInterval=0.5`` (a string to Helm), and the interval's bound;
* F7 a tag in an image repository (``repo:0.2.0:0.1.0``);
* F8 ``podAnnotations`` the chart sets itself (the chart's value won).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_helpers import (
    CHART,
    NAMESPACE,
    RELEASE,
    container,
    env_of,
    helm,
    one,
    pod_spec,
    render,
    with_remote,
)

from epochfs.sidecar.config import SidecarSettings, parse

FILES = {"secretName": "s3", "mode": "files"}


def template(helm_bin: Path, tmp: Path, values: dict[str, Any] | None = None,
             *args: str) -> subprocess.CompletedProcess[str]:
    return helm(helm_bin, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args,
                values=with_remote(values or {}), tmp=tmp, check=False)


def refused(helm_bin: Path, tmp: Path, values: dict[str, Any] | None = None, *args: str) -> str:
    proc = template(helm_bin, tmp, values, *args)
    assert proc.returncode != 0, f"rendered: {values} {args}"
    return proc.stderr


def credentials(**creds: Any) -> dict[str, Any]:
    return {"remote": {"credentials": creds}}


# --------------------------------------------------------------------------- F2, F3 credentials


@pytest.mark.parametrize(("creds", "expected"), [
    ({"secretName": "gcs", "fileEnv": {"GOOGLE_APPLICATION_CREDENTIALS": "key.json"}},
     'remote.credentials.fileEnv is set but remote.credentials.mode is "env"'),
    ({"mode": "files", "fileEnv": {"AWS_SHARED_CREDENTIALS_FILE": "credentials"}},
     "remote.credentials.mode=files needs remote.credentials.secretName"),
    ({"fileEnv": {"AWS_SHARED_CREDENTIALS_FILE": "credentials"}},
     "fileEnv is read only in files mode"),
    (FILES, "remote.credentials.mode=files with an empty remote.credentials.fileEnv"),
])
def test_credentials_that_would_be_dropped_are_refused(helm_bin: Path, tmp_path: Path,
                                                        creds: dict[str, Any], expected: str) -> None:
    assert expected in refused(helm_bin, tmp_path, credentials(**creds))


def test_files_mode_with_a_secret_and_file_env_renders_the_paths(helm_bin: Path, tmp_path: Path) -> None:
    values = with_remote(credentials(**FILES, fileEnv={"AWS_SHARED_CREDENTIALS_FILE": "credentials"}))
    env = env_of(container(pod_spec(render(helm_bin, values, tmp_path)), "epochfs"))
    assert env["AWS_SHARED_CREDENTIALS_FILE"] == "/var/run/secrets/epochfs/remote/credentials"


@pytest.mark.parametrize(("name", "instead"), [
    ("EPOCHFS_REMOTE", "set remote.url"),
    ("HOME", "leave HOME to the chart"),
    ("EPOCHFS_CAPACITY", "set cache.capacity"),
    ("POD_NAME", "leave it to the chart"),
])
def test_file_env_naming_a_chart_variable_is_refused(helm_bin: Path, tmp_path: Path, name: str,
                                                     instead: str) -> None:
    err = refused(helm_bin, tmp_path, credentials(**FILES, fileEnv={name: "credentials"}))
    assert f"remote.credentials.fileEnv: {name} is the chart's own to set" in err and instead in err, err


# --------------------------------------------------------------------------- F4 env values


@pytest.mark.parametrize("where", ["sidecar", "trainer"])
@pytest.mark.parametrize(("entry", "expected"), [
    ({"name": "EPOCHFS_RETRIES", "value": 10}, "/env/0/value': got number, want string"),
    ({"name": "DEBUG", "value": True}, "/env/0/value': got boolean, want string"),
    ({"name": "X", "valueFrom": "metadata.name"}, "/env/0/valueFrom': got string, want object"),
])
def test_env_values_must_be_strings(helm_bin: Path, tmp_path: Path, where: str,
                                    entry: dict[str, Any], expected: str) -> None:
    err = refused(helm_bin, tmp_path, {where: {"env": [entry]}})
    assert f"at '/{where}{expected}" in err, err


def test_string_and_value_from_env_entries_render(helm_bin: Path, tmp_path: Path) -> None:
    value_from = {"fieldRef": {"fieldPath": "metadata.name"}}
    entries: list[dict[str, Any]] = [{"name": "EPOCHFS_RETRIES", "value": "10"},
                                     {"name": "MY_POD", "valueFrom": value_from}]
    spec = pod_spec(render(helm_bin, with_remote({"sidecar": {"env": entries},
                                                   "trainer": {"env": entries}}), tmp_path))
    for name in ("epochfs", "trainer"):
        env = env_of(container(spec, name))
        assert env["EPOCHFS_RETRIES"] == "10" and env["MY_POD"] == value_from


# --------------------------------------------------------------------------- F5, F7 images


def test_an_empty_trainer_tag_without_a_digest_is_refused(helm_bin: Path, tmp_path: Path) -> None:
    err = refused(helm_bin, tmp_path, {"trainer": {"image": {"tag": ""}}})
    assert "trainer.image.tag is empty and trainer.image.digest too" in err, err
    digest = "sha256:" + "b" * 64
    spec = pod_spec(render(helm_bin, with_remote({"trainer": {"image": {"tag": "", "digest": digest}}}),
                           tmp_path))
    assert container(spec, "trainer")["image"] == f"pytorch/pytorch@{digest}"


def test_the_sidecars_empty_tag_still_means_the_charts_app_version(helm_bin: Path, tmp_path: Path) -> None:
    app_version = next(line.split(":", 1)[1].strip().strip('"')
                       for line in (CHART / "Chart.yaml").read_text().splitlines()
                       if line.startswith("appVersion:"))
    spec = pod_spec(render(helm_bin, with_remote({"image": {"tag": ""}}), tmp_path))
    assert container(spec, "epochfs")["image"] == f"ghcr.io/epochfs/epochfs:{app_version}"


@pytest.mark.parametrize(("key", "repository"), [
    ("image", "registry.example/epochfs:0.2.0"),
    ("image", "registry.example:5000/epochfs:0.2.0"),
    ("image", "epochfs@sha256:" + "a" * 64),
    ("trainer.image", "pytorch/pytorch:2.5.1"),
])
def test_a_tag_or_digest_in_a_repository_is_refused(helm_bin: Path, tmp_path: Path, key: str,
                                                    repository: str) -> None:
    err = refused(helm_bin, tmp_path, None, "--set-string", f"{key}.repository={repository}")
    assert f'{key}.repository "{repository}" holds a tag or a digest' in err, err
    assert f"the tag in {key}.tag" in err, err


@pytest.mark.parametrize("repository", ["registry.example:5000/epochfs", "localhost:5000/a/b",
                                        "ghcr.io/epochfs/epochfs", "epochfs"])
def test_a_registry_with_a_port_is_a_repository(helm_bin: Path, tmp_path: Path, repository: str) -> None:
    values = with_remote({"image": {"repository": repository, "tag": "0.2.0"},
                          "trainer": {"image": {"repository": repository}}})
    spec = pod_spec(render(helm_bin, values, tmp_path))
    assert container(spec, "epochfs")["image"] == f"{repository}:0.2.0"
    assert container(spec, "trainer")["image"].startswith(f"{repository}:")


# --------------------------------------------------------------------------- F6 cutInterval


def sidecar_settings(objs: list[dict[str, Any]]) -> SidecarSettings:
    """What the sidecar makes of its rendered environment (the real parser of its settings)."""
    env = {e["name"]: e["value"] for e in container(pod_spec(objs), "epochfs")["env"] if "value" in e}
    return parse(SidecarSettings, [], env)


@pytest.mark.parametrize(("args", "expected"), [
    (("--set", "sidecar.cutInterval=0.5"), 0.5),
    (("--set-string", "sidecar.cutInterval=.25"), 0.25),
    (("--set", "sidecar.cutInterval=30"), 30.0),
    (("--set", "sidecar.cutInterval=604800"), 604800.0),
    ((), 0.0),
])
def test_cut_interval_reaches_the_sidecar_as_the_same_number(helm_bin: Path, tmp_path: Path,
                                                             args: tuple[str, ...], expected: float) -> None:
    proc = template(helm_bin, tmp_path, None, *args)
    assert proc.returncode == 0, proc.stderr
    objs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    assert sidecar_settings(objs).cut_interval == expected


def test_cut_interval_from_a_values_file_number(helm_bin: Path, tmp_path: Path) -> None:
    objs = render(helm_bin, with_remote({"sidecar": {"cutInterval": 2.5}}), tmp_path)
    assert sidecar_settings(objs).cut_interval == 2.5


@pytest.mark.parametrize(("args", "expected"), [
    (("--set", "sidecar.cutInterval=604801"), "maximum: got 604,801, want 604,800"),
    (("--set", "sidecar.cutInterval=-1"), "minimum: got -1, want 0"),
    (("--set", "sidecar.cutInterval=700000.5"), "sidecar.cutInterval 700000.5 is more than 604800 seconds"),
    (("--set-string", "sidecar.cutInterval=1e3"), "/sidecar/cutInterval"),
    (("--set-string", "sidecar.cutInterval=abc"), "/sidecar/cutInterval"),
])
def test_cut_interval_out_of_bounds_is_refused(helm_bin: Path, tmp_path: Path, args: tuple[str, ...],
                                               expected: str) -> None:
    assert expected in refused(helm_bin, tmp_path, None, *args)


# --------------------------------------------------------------------------- F8 podAnnotations


@pytest.mark.parametrize("key", ["prometheus.io/port", "prometheus.io/scrape", "prometheus.io/path"])
def test_prometheus_annotations_the_chart_sets_are_refused(helm_bin: Path, tmp_path: Path, key: str) -> None:
    err = refused(helm_bin, tmp_path, {"podAnnotations": {key: "9999"}})
    assert f"podAnnotations: {key} is set by the chart with metrics.enabled" in err, err


def test_prometheus_annotations_are_the_users_without_metrics(helm_bin: Path, tmp_path: Path) -> None:
    values = with_remote({"metrics": {"enabled": False}, "podAnnotations": {"prometheus.io/port": "9999"}})
    template_ = one(render(helm_bin, values, tmp_path), "Job")["spec"]["template"]
    assert template_["metadata"]["annotations"]["prometheus.io/port"] == "9999"


def test_the_default_container_annotation_is_refused(helm_bin: Path, tmp_path: Path) -> None:
    annotations = {"kubectl.kubernetes.io/default-container": "epochfs"}
    err = refused(helm_bin, tmp_path, {"podAnnotations": annotations})
    assert "podAnnotations: kubectl.kubernetes.io/default-container is set by the chart's Job" in err, err
