"""Values the chart rendered into manifests that Kubernetes refuses, a pod that never starts or
one that does other than it says, now refused at render time in words naming the value (or, for
free text, rendered quoted), each by the real helm binary. Found by an exploratory bad-input run:

* free text unquoted: a newline and ``hostPID: true`` in ``trainer.workingDir`` gave the pod host
  PIDs, a ``#`` in a path or an image made the rest a YAML comment (another mount path than the
  view's variable named, the ``latest`` image pulled);
* credentials in an ``s3://`` URL were printed in the error (a CI log keeps it);
* ``runAsNonRoot`` with ``runAsUser: 0`` (a container the kubelet refuses to start: the Job waits);
* a cache volume of 0 or 1 byte (a cache budget of 0, which the sidecar refuses: a crash loop) and
  a ``trainer.shmSize`` of 0 (no limit at all);
* two trainer volumes of one name or two mounts at one path (refused by the API), a trainer
  variable of the chart's wiring (silently overriding it);
* object names, label and annotation keys and values, and resource quantities Kubernetes refuses;
* NOTES naming objects a ``job.enabled=false`` install did not render.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helm_helpers import (
    CHART,
    NAMESPACE,
    RELEASE,
    container,
    env_of,
    helm,
    mounts_of,
    pod_spec,
    refused,
    render,
    template,
    with_remote,
)


def test_free_text_is_rendered_as_one_string(helm_bin: Path, tmp_path: Path) -> None:
    injected = "/work\n      hostPID: true"
    objs = render(helm_bin, with_remote({"trainer": {"workingDir": injected, "image": {
        "repository": "pytorch/pytorch #x"}}, "sidecar": {"mountPath": "/mnt/a #x"}}), tmp_path)
    spec = pod_spec(objs)
    assert "hostPID" not in spec, spec
    trainer = container(spec, "trainer")
    assert trainer["workingDir"] == injected
    assert trainer["image"].startswith("pytorch/pytorch #x:"), trainer["image"]
    assert "/mnt/a #x" in mounts_of(trainer), mounts_of(trainer)
    assert env_of(trainer)["EPOCHFS_MOUNT"].startswith("/mnt/a #x/"), env_of(trainer)


def test_credentials_in_an_s3_url_are_refused_without_being_shown(helm_bin: Path, tmp_path: Path) -> None:
    said = refused(helm_bin, {"remote": {"url": "s3://AKIAXXX:wJalrSECRET@bucket/p"}}, tmp_path)
    assert "remote.url holds credentials" in said and "remote.credentials" in said, said
    assert "SECRET" not in said and "AKIAXXX" not in said, said
    for url in ("az://container@account.blob.core.windows.net/p", "https://user@host/data"):
        assert template(helm_bin, {"remote": {"url": url}}, tmp_path).returncode == 0, url


def test_a_root_trainer_under_run_as_non_root_is_refused(helm_bin: Path, tmp_path: Path) -> None:
    said = refused(helm_bin, {"trainer": {"securityContext": {"runAsUser": 0}}}, tmp_path)
    assert ("the trainer's runAsNonRoot is true (trainer.securityContext.runAsNonRoot) and its runAsUser is "
            "0 (trainer.securityContext.runAsUser)") in said, said
    as_root = {"trainer": {"securityContext": {"runAsUser": 0, "runAsNonRoot": False}}}
    assert template(helm_bin, as_root, tmp_path).returncode == 0


@pytest.mark.parametrize(("values", "words"), [
    ({"cache": {"volume": {"size": "0"}}}, "/cache/volume/size"),
    ({"cache": {"volume": {"size": "1"}}}, "cache.volume.size 1 leaves a cache budget of 0 bytes"),
    ({"trainer": {"shmSize": "0"}}, "/trainer/shmSize"),
])
def test_sizes_that_leave_nothing_are_refused(helm_bin: Path, tmp_path: Path, values: dict[str, Any],
                                              words: str) -> None:
    assert words in refused(helm_bin, values, tmp_path)


@pytest.mark.parametrize(("trainer", "words"), [
    ({"extraVolumes": [{"name": "ck", "emptyDir": {}}, {"name": "ck", "emptyDir": {}}]},
     'trainer.extraVolumes: two volumes are named "ck"'),
    ({"extraVolumes": [{"name": "ck", "emptyDir": {}}],
      "extraVolumeMounts": [{"name": "ck", "mountPath": "/ck"}, {"name": "ck", "mountPath": "/ck/"}]},
     "trainer.extraVolumeMounts: two mounts at /ck/"),
    ({"env": [{"name": "EPOCHFS_MOUNT", "value": "/x"}]},
     "trainer.env: EPOCHFS_MOUNT is the chart's own to set"),
])
def test_a_trainer_list_that_repeats_or_overrides_the_chart_is_refused(
        helm_bin: Path, tmp_path: Path, trainer: dict[str, Any], words: str) -> None:
    assert words in refused(helm_bin, {"trainer": trainer}, tmp_path)


def test_a_torch_client_setting_in_trainer_env_is_the_users(helm_bin: Path, tmp_path: Path) -> None:
    """Reports turned off (docs/torchclient.md: EPOCHFS_REPORT_URL=off), a setting of its own."""
    env = [{"name": "EPOCHFS_TIMEOUT", "value": "60"}, {"name": "EPOCHFS_REPORT_URL", "value": "off"}]
    objs = render(helm_bin, with_remote({"trainer": {"env": env}}), tmp_path)
    trainer = container(pod_spec(objs), "trainer")
    assert trainer["env"][-2:] == env, trainer["env"]
    assert env_of(trainer)["EPOCHFS_TIMEOUT"] == "60"


def test_the_issuer_of_the_webhooks_certificate_is_rendered_whole(helm_bin: Path, tmp_path: Path) -> None:
    values = {"webhook": {"enabled": True, "certManager": {"enabled": True, "issuerRef": {
        "kind": "ClusterIssuer", "name": "team-ca #prod"}}}}
    [cert] = [o for o in render(helm_bin, with_remote(values), tmp_path) if o["kind"] == "Certificate"]
    assert cert["spec"]["issuerRef"]["name"] == "team-ca #prod", cert["spec"]["issuerRef"]


@pytest.mark.parametrize(("values", "release", "words"), [
    ({"fullnameOverride": "Foo_Bar"}, RELEASE, "/fullnameOverride"),
    ({"nodes": 2}, "run.v1",
     'Service would be named "run.v1-epochfs" (from the release name and nameOverride)'),
    ({}, "2024-run", 'Service would be named "2024-run-epochfs"'),
    ({"serviceAccount": {"name": "Bad_SA"}}, RELEASE, "/serviceAccount/name"),
    ({"podLabels": {"bad key": "x"}}, RELEASE, "invalid propertyName 'bad key'"),
    ({"podLabels": {"ok": "has space"}}, RELEASE, "/podLabels/ok"),
    ({"podAnnotations": {"bad key": "x"}}, RELEASE, "invalid propertyName 'bad key'"),
    ({"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "has space"}}}}, RELEASE,
     "/metrics/serviceMonitor/labels/release"),
    ({"trainer": {"resources": {"limits": {"memory": "10 GB"}}}}, RELEASE,
     "/trainer/resources/limits/memory"),
    ({"sidecar": {"resources": {"limits": {"cpu": "abc"}}}}, RELEASE, "/sidecar/resources/limits/cpu"),
])
def test_what_kubernetes_refuses_is_refused_at_render(helm_bin: Path, tmp_path: Path, values: dict[str, Any],
                                                      release: str, words: str) -> None:
    assert words in refused(helm_bin, values, tmp_path, release)


def test_what_kubernetes_takes_still_renders(helm_bin: Path, tmp_path: Path) -> None:
    longest = "a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "." + "d" * 61 + "/" + "e" * 63  # 317
    assert template(helm_bin, {"podAnnotations": {longest: ""}}, tmp_path).returncode == 0
    # No Service rendered: its name need not be a DNS-1035 label (a release may start with a digit).
    bare = {"job": {"enabled": False}, "metrics": {"enabled": False}}
    assert template(helm_bin, bare, tmp_path, "2024-run").returncode == 0
    values = {"podAnnotations": {"example.com/note": "any text: it may hold spaces"},
              "podLabels": {"team": "ml-infra"}, "serviceAccount": {"name": "trainer.sa"},
              "trainer": {"resources": {"limits": {"memory": "4Gi", "cpu": 2}, "requests": {"cpu": "500m"}}}}
    spec = pod_spec(render(helm_bin, with_remote(values), tmp_path))
    assert container(spec, "trainer")["resources"]["limits"] == {"memory": "4Gi", "cpu": 2}


def _notes(helm_bin: Path, values: dict[str, Any], tmp: Path) -> str:
    out = helm(helm_bin, "install", "--dry-run=client", RELEASE, str(CHART), "--namespace", NAMESPACE,
               values=with_remote(values), tmp=tmp).stdout
    return out.split("NOTES:", 1)[1]


def test_the_notes_name_only_what_was_rendered(helm_bin: Path, tmp_path: Path) -> None:
    notes = _notes(helm_bin, {"job": {"enabled": False}}, tmp_path)
    shared = f"only the shared objects (ServiceAccount {RELEASE}-epochfs, RBAC, metrics Service)."
    assert shared in notes, notes
    bare = {"job": {"enabled": False}, "metrics": {"enabled": False}, "rbac": {"create": False},
            "serviceAccount": {"create": False}, "kubeReporting": {"enabled": False}}
    notes = _notes(helm_bin, bare, tmp_path)
    assert "and no shared object either" in notes and "ServiceAccount" not in notes.split("\n\n")[0], notes
