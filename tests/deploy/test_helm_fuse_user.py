"""The FUSE view's sidecar user, refused at render where the pod could never run.

* A pod-level ``runAsNonRoot: true`` over the FUSE view's root sidecar: the kubelet refuses to
  start the sidecar (``CreateContainerConfigError: container's runAsUser breaks non-root
  policy``) and the trainer never starts. The admission webhook refuses the same pod
  (sidecar/webhook/podchecks.py); the chart refuses it in the chart's Job, a parent chart's
  workload and a webhook profile alike, with the webhook's way out.
* A non-root FUSE sidecar mounts through the image's setuid fusermount3, which needs the user in
  the image's /etc/passwd: any uid but root and the image's own user crash-loops the sidecar
  (``fusermount3: could not determine username``).

Rendered by the real helm binary.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from helm_helpers import (
    CHART,
    NAMESPACE,
    RELEASE,
    ROOT,
    build_examples,
    container,
    example_values,
    helm,
    pod_spec,
    render,
    with_remote,
)

NON_ROOT_POD = {"podSecurityContext": {"fsGroup": 10001, "runAsNonRoot": True}}


def refusal(helm_bin: Path, values: dict[str, Any], tmp: Path) -> str:
    """helm template's error for values that must be refused (it fails if they render)."""
    proc = helm(helm_bin, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                values=with_remote(values), tmp=tmp, check=False)
    assert proc.returncode != 0, f"rendered, but should be refused: {values}"
    return proc.stderr


def image_users() -> set[int]:
    """The uids with a passwd entry in the epochfs image: root and the Dockerfile's useradd."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    return {0} | {int(uid) for uid in re.findall(r"useradd\b[^\n]*?--uid (\d+)", dockerfile)}


def test_a_non_root_pod_with_the_root_fuse_sidecar_is_refused(helm_bin: Path, tmp_path: Path) -> None:
    """The Job, with the webhook's way out: runAsNonRoot on the trainer, or the folder view."""
    err = refusal(helm_bin, NON_ROOT_POD, tmp_path)
    assert "podSecurityContext.runAsNonRoot: true with the FUSE view" in err
    assert "set runAsNonRoot on the trainer container instead" in err
    assert "sidecar.view=folder" in err
    err = refusal(helm_bin, {**NON_ROOT_POD, "sidecar": {"native": False,
                                                        "runAsUser": 0}, "trainer": {"command": ["true"]}},
                  tmp_path)
    assert "podSecurityContext.runAsNonRoot: true with the FUSE view" in err


def test_a_webhook_profile_and_a_parent_chart_are_refused_too(helm_bin: Path, tmp_path: Path) -> None:
    """epochfs.sidecarContainer refuses it wherever it is included."""
    err = refusal(helm_bin, {"webhook": {"enabled": True, "profiles": {"strict": NON_ROOT_POD}}}, tmp_path)
    assert "podSecurityContext.runAsNonRoot: true with the FUSE view" in err
    chart = build_examples(helm_bin, tmp_path)
    proc = helm(helm_bin, "template", RELEASE, str(chart), "--namespace", NAMESPACE,
                values=example_values("pod", NON_ROOT_POD), tmp=tmp_path, check=False)
    assert proc.returncode != 0 and "podSecurityContext.runAsNonRoot: true" in proc.stderr


@pytest.mark.parametrize("values", [
    {"sidecar": {"view": "folder"}},
    {"sidecar": {"runAsUser": 10001}},
], ids=["folder-view", "fuse-as-10001"])
def test_a_non_root_pod_renders_where_the_sidecar_is_not_root(helm_bin: Path, tmp_path: Path,
                                                              values: dict[str, Any]) -> None:
    spec = pod_spec(render(helm_bin, with_remote({**NON_ROOT_POD, **values}), tmp_path))
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container(spec, "epochfs")["securityContext"]["runAsUser"] != 0


@pytest.mark.parametrize("uid", [1000, 65532, 1000680000])
def test_a_fuse_sidecar_user_without_a_passwd_entry_is_refused(helm_bin: Path, tmp_path: Path,
                                                               uid: int) -> None:
    """The message names the value and the uids that work."""
    err = refusal(helm_bin, {"sidecar": {"runAsUser": uid}}, tmp_path)
    assert f"sidecar.runAsUser {uid} with the FUSE view" in err
    assert "0 (root) and 10001 (epochfs)" in err
    assert "sidecar.view=folder" in err


def test_the_image_users_render_with_the_fuse_view(helm_bin: Path, tmp_path: Path) -> None:
    """Exactly the uids the image can name: the refusal's list follows the Dockerfile."""
    users = image_users()
    assert users == {0, 10001}
    for uid in sorted(users):
        spec = pod_spec(render(helm_bin, with_remote({"sidecar": {"runAsUser": uid}}), tmp_path))
        assert container(spec, "epochfs")["securityContext"]["runAsUser"] == uid


def test_the_folder_view_keeps_any_non_root_user(helm_bin: Path, tmp_path: Path) -> None:
    """No fusermount3 there: a platform's own uid is fine."""
    values = with_remote({"sidecar": {"view": "folder", "runAsUser": 1000}})
    spec = pod_spec(render(helm_bin, values, tmp_path))
    assert container(spec, "epochfs")["securityContext"]["runAsUser"] == 1000
