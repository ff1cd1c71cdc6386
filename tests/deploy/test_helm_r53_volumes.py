"""The sidecar's own volumes (review C53, F1), rendered by the real helm binary.

A ``file://`` remote is a folder in the sidecar's container, whose root filesystem is the epochfs
image's. The chart listed file:// as a remote but gave the sidecar no way to mount a dataset
(``sidecar`` refused unknown keys, ``trainer.extraVolumes`` reach the trainer only), so such a
pod always crash-looped. ``sidecar.extraVolumes``/``sidecar.extraVolumeMounts`` now mount it, and
a ``file:///PATH`` remote that no sidecar mount holds is refused at render.
"""

from __future__ import annotations

import json
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
    helm,
    mounts_of,
    pod_spec,
    render,
    render_pod_snippet,
)

DATASET: dict[str, Any] = {
    "remote": {"url": "file:///datasets/imagenet"},
    "sidecar": {
        "extraVolumes": [{"name": "datasets",
                          "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}}],
        "extraVolumeMounts": [{"name": "datasets", "mountPath": "/datasets", "readOnly": True}],
    },
}


def template(helm_bin: Path, values: dict[str, Any], tmp: Path) -> subprocess.CompletedProcess[str]:
    """One render; the values name their own remote (file:// here, unlike helm_helpers' default)."""
    return helm(helm_bin, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                values=values, tmp=tmp, check=False)


def refused(helm_bin: Path, values: dict[str, Any], tmp: Path) -> str:
    proc = template(helm_bin, values, tmp)
    assert proc.returncode != 0, f"rendered: {values}"
    return proc.stderr


def with_sidecar(**sidecar: Any) -> dict[str, Any]:
    """DATASET with the sidecar's values replaced key by key."""
    return {**DATASET, "sidecar": {**DATASET["sidecar"], **sidecar}}


def test_a_file_remote_gets_its_dataset_mounted_read_only_in_the_sidecar(helm_bin: Path,
                                                                          tmp_path: Path) -> None:
    spec = pod_spec(render(helm_bin, DATASET, tmp_path))
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["datasets"] == DATASET["sidecar"]["extraVolumes"][0]
    sidecar = container(spec, "epochfs")
    assert mounts_of(sidecar)["/datasets"] == {"name": "datasets", "mountPath": "/datasets",
                                                "readOnly": True}
    assert "/datasets" not in mounts_of(container(spec, "trainer"))


def test_the_trainer_may_mount_the_sidecars_volume_too(helm_bin: Path, tmp_path: Path) -> None:
    values = {**DATASET, "trainer": {"extraVolumeMounts": [{"name": "datasets", "mountPath": "/data",
                                                            "readOnly": True}]}}
    spec = pod_spec(render(helm_bin, values, tmp_path))
    assert [v["name"] for v in spec["volumes"]].count("datasets") == 1
    assert mounts_of(container(spec, "trainer"))["/data"]["name"] == "datasets"


def test_a_file_remote_no_sidecar_mount_holds_is_refused(helm_bin: Path, tmp_path: Path) -> None:
    err = refused(helm_bin, {"remote": {"url": "file:///datasets/imagenet"}}, tmp_path)
    assert "remote.url file:///datasets/imagenet" in err, err
    assert "sidecar.extraVolumes" in err and "sidecar.extraVolumeMounts" in err, err
    # A mount beside the path, not above it, holds nothing of it.
    other = with_sidecar(extraVolumeMounts=[{"name": "datasets", "mountPath": "/datasets/imagenet2"}])
    assert "no mount of sidecar.extraVolumeMounts holds" in refused(helm_bin, other, tmp_path)


@pytest.mark.parametrize("mount", ["/datasets/imagenet", "/datasets/imagenet/", "/"])
def test_a_mount_at_the_path_or_above_it_holds_it(helm_bin: Path, tmp_path: Path, mount: str) -> None:
    values = with_sidecar(extraVolumeMounts=[{"name": "datasets", "mountPath": mount}])
    if mount == "/":
        # "/" holds every path, and is above every mount of the chart: refused for that.
        assert "one is inside the other" in refused(helm_bin, values, tmp_path)
        return
    assert template(helm_bin, values, tmp_path).returncode == 0


def test_file_localhost_is_the_same_path(helm_bin: Path, tmp_path: Path) -> None:
    err = refused(helm_bin, {"remote": {"url": "file://localhost/data/x"}}, tmp_path)
    assert "the sidecar reads /data/x" in err, err


@pytest.mark.parametrize(("sidecar", "expected"), [
    ({"extraVolumes": [{"name": "epochfs-data", "emptyDir": {}}], "extraVolumeMounts": []},
     'sidecar.extraVolumes: "epochfs-data" is a name of the chart\'s own volumes'),
    ({"extraVolumes": [{"name": "dshm", "emptyDir": {}}], "extraVolumeMounts": []},
     'sidecar.extraVolumes: "dshm" is a volume of the chart\'s Job'),
    ({"extraVolumes": DATASET["sidecar"]["extraVolumes"] * 2},
     'sidecar.extraVolumes: "datasets" is there twice'),
    ({"extraVolumeMounts": [{"name": "elsewhere", "mountPath": "/datasets"}]},
     'sidecar.extraVolumeMounts: "elsewhere" names no volume of sidecar.extraVolumes'),
    ({"extraVolumeMounts": [{"name": "datasets", "mountPath": "/datasets"},
                            {"name": "datasets", "mountPath": "/tmp"}]},
     "sidecar.extraVolumeMounts datasets (/tmp)"),
    ({"extraVolumeMounts": [{"name": "datasets", "mountPath": "/datasets"},
                            {"name": "datasets", "mountPath": "/var/cache/epochfs/x"}]},
     "cache.path (/var/cache/epochfs) and sidecar.extraVolumeMounts datasets"),
    ({"extraVolumeMounts": [{"name": "datasets", "mountPath": "/datasets"},
                            {"name": "datasets", "mountPath": "/datasets/"}]},
     "are one path"),
])
def test_sidecar_volumes_that_clash_with_the_chart_or_each_other_are_refused(
        helm_bin: Path, tmp_path: Path, sidecar: dict[str, Any], expected: str) -> None:
    assert expected in refused(helm_bin, with_sidecar(**sidecar), tmp_path)


def test_a_volume_in_both_lists_is_refused(helm_bin: Path, tmp_path: Path) -> None:
    values = {**DATASET, "trainer": {"extraVolumes": DATASET["sidecar"]["extraVolumes"]}}
    err = refused(helm_bin, values, tmp_path)
    assert 'sidecar.extraVolumes and trainer.extraVolumes both have a volume "datasets"' in err, err


def test_nested_mounts_of_ones_own_and_inside_tmp_are_allowed(helm_bin: Path, tmp_path: Path) -> None:
    values = with_sidecar(extraVolumeMounts=[{"name": "datasets", "mountPath": "/datasets"},
                                             {"name": "datasets", "mountPath": "/datasets/more"},
                                             {"name": "datasets", "mountPath": "/tmp/scratch"}])
    proc = template(helm_bin, values, tmp_path)
    assert proc.returncode == 0, proc.stderr


def test_the_schema_checks_the_sidecars_volumes(helm_bin: Path, tmp_path: Path) -> None:
    err = refused(helm_bin, with_sidecar(extraVolumeMounts=[{"name": "datasets",
                                                             "mountPath": "datasets"}]), tmp_path)
    assert "/sidecar/extraVolumeMounts/0/mountPath" in err, err
    err = refused(helm_bin, with_sidecar(extraVolumes=[{"name": "Data_Set"}]), tmp_path)
    assert "/sidecar/extraVolumes/0/name" in err, err


def test_an_attached_pod_and_the_webhook_get_the_volume(helm_bin: Path, tmp_path: Path) -> None:
    """epochfs.volumes and the sidecar container carry them everywhere the chart attaches."""
    pod = render_pod_snippet(helm_bin, DATASET, tmp_path)["spec"]
    assert "datasets" in {v["name"] for v in pod["volumes"]}
    assert "/datasets" in mounts_of(container(pod, "epochfs"))

    objs = render(helm_bin, {**DATASET, "webhook": {"enabled": True}}, tmp_path)
    docs = [json.loads(text) for o in objs if o["kind"] == "ConfigMap"
            for key, text in (o.get("data") or {}).items() if key == "default.json"]
    assert len(docs) == 1, "no injection document of the default profile"
    assert "datasets" in {v["name"] for v in docs[0]["volumes"]}
    sidecar = docs[0]["sidecarContainers"][0]
    assert "/datasets" in {m["mountPath"] for m in sidecar["volumeMounts"]}


def test_the_doc_example_renders(helm_bin: Path, tmp_path: Path) -> None:
    """docs/kubernetes.md's "A dataset on a volume" block, as written, renders."""
    text = (CHART.parent.parent / "docs" / "kubernetes.md").read_text()
    block = text.split("**A dataset on a volume.**", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    values = yaml.safe_load(block)
    spec = pod_spec(render(helm_bin, values, tmp_path))
    assert mounts_of(container(spec, "epochfs"))["/datasets"]["readOnly"] is True
