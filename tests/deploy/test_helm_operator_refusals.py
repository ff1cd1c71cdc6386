"""Values the chart rendered but that left operators with a pod or a cluster that cannot work,
now refused at render with a message naming the value; and the /tmp size limit, now a value.

* a webhook PodDisruptionBudget percentage whose rounded-up count (the disruption controller
  rounds up) reaches webhook.replicas: every node drain blocks;
* a cache.capacity, remote.endpointUrl or sidecar.schedule the sidecar refuses at start (the pod
  crash-loops, the Job never ends): checked against the sidecar's own parsers, so every form it
  accepts still renders;
* a sidecar.minSamples above the schedule's initial keys (no epoch could ever be cut);
* chart mount paths at /dev/shm, and an extra mount equal to sidecar.mountPath written with a
  trailing slash: two mounts at one path;
* an extra volume named epochfs-*: the chart's names.

Rendered by the real helm binary."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from helm_helpers import (
    CHART,
    NAMESPACE,
    RELEASE,
    helm,
    one,
    pod_spec,
    render,
    with_remote,
)

from epochfs.sidecar.confparse import _capacity
from epochfs.sidecar.confplaces import _endpoint_url
from epochfs.sidecar.store.records import Schedule


def template(helm_bin: Path, values: dict[str, Any], tmp: Path) -> tuple[int, str]:
    proc = helm(helm_bin, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                "--kube-version", "1.31.0", values=with_remote(values), tmp=tmp, check=False)
    return proc.returncode, proc.stderr


def sidecar_accepts(parse: Any, text: str) -> bool:
    try:
        parse(text)
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------- webhook PDB


@pytest.mark.parametrize(("replicas", "min_available"), [
    (2, "60%"), (1, "50%"), (3, "90%"), (2, "100%"), (3, "67%"), (4, "76%"),
    (2, "50%"), (3, "66%"), (1, "0%"), (4, "75%"), (2, 1), (3, 2), (2, 2),
])
def test_pdb_percentage_counted_as_the_disruption_controller_counts(
        helm_bin: Path, tmp_path: Path, replicas: int, min_available: int | str) -> None:
    """Refused exactly where the pods that must stay, rounded up, are all the replicas."""
    if isinstance(min_available, str):
        pods = math.ceil(replicas * int(min_available[:-1]) / 100)
    else:
        pods = min_available
    values = {"job": {"enabled": False},
              "webhook": {"enabled": True, "replicas": replicas,
                          "podDisruptionBudget": {"minAvailable": min_available}}}
    rc, err = template(helm_bin, values, tmp_path)
    if pods >= replicas:
        assert rc != 0, f"rendered: replicas {replicas}, minAvailable {min_available}"
        assert "minAvailable" in err and "drain" in err, err
    else:
        assert rc == 0, err


def test_pdb_default_and_the_values_example_render(helm_bin: Path, tmp_path: Path) -> None:
    """The default (1) and values.yaml's example ("50%") at the default replicas."""
    for pdb in ({}, {"minAvailable": "50%"}):
        objs = render(helm_bin, with_remote({"job": {"enabled": False},
                                             "webhook": {"enabled": True, "podDisruptionBudget": pdb}}),
                      tmp_path)
        assert one(objs, "PodDisruptionBudget")["spec"]["minAvailable"] == pdb.get("minAvailable", 1)


# --------------------------------------------------------------------------- what the sidecar refuses

CAPACITIES = ["0", "0.1", "0Ki", "0.0001Ki", "000", "1", "0.5Ki", "500Mi", "20Gi", "1.5T", "20gi",
              "1.5 TB", "4096", ".5G"]
ENDPOINTS = ["minio:9000", "http://minio:9000", "HTTPS://s3.example.com/path", "http://:9000",
             "http://minio:99999", "http://minio:", "http://user:pw@minio:9000/", "http://[::1]:9000",
             "ftp://minio", "http://minio:port", "http:minio", " http://minio:9000 ", "https://r2"]
SCHEDULES = ["initial=0", "garbage", "initial=1000,growth=1.5", "growth=2", "initial=1_000",
             "initial=+5, growth = 1e1", "growth=0.5", "growth=1.", "growth=inf", "initial=5,",
             "foo=1", "initial=10,growth=1", "initial=-3", "initial=1.5", "growth=nan",
             "initial = 7 ,growth=1.25", "initial=1e3"]


@pytest.mark.parametrize("capacity", CAPACITIES)
def test_capacity_refused_where_the_sidecar_refuses_it(helm_bin: Path, tmp_path: Path, capacity: str) -> None:
    # hostPath: no volume bounds the budget, so only the sidecar's own rule decides.
    rc, err = template(helm_bin, {"cache": {"capacity": capacity, "volume": {"type": "hostPath"}}}, tmp_path)
    if sidecar_accepts(_capacity, capacity):
        assert rc == 0, err
    else:
        assert rc != 0, f"rendered cache.capacity {capacity!r}, which the sidecar refuses"
        assert "cache.capacity" in err and capacity in err, err


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_endpoint_url_refused_where_the_sidecar_refuses_it(helm_bin: Path, tmp_path: Path,
                                                           endpoint: str) -> None:
    rc, err = template(helm_bin, {"remote": {"endpointUrl": endpoint}}, tmp_path)
    if sidecar_accepts(_endpoint_url, endpoint):
        assert rc == 0, err
    else:
        assert rc != 0, f"rendered remote.endpointUrl {endpoint!r}, which the sidecar refuses"
        assert "remote.endpointUrl" in err and "http://minio:9000" in err, err
        assert "pw" not in err  # a password in the URL is never echoed


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_schedule_refused_where_the_sidecar_refuses_it(helm_bin: Path, tmp_path: Path, schedule: str) -> None:
    rc, err = template(helm_bin, {"sidecar": {"schedule": schedule}}, tmp_path)
    if sidecar_accepts(Schedule.parse, schedule):
        assert rc == 0, err
    else:
        assert rc != 0, f"rendered sidecar.schedule {schedule!r}, which the sidecar refuses"
        assert "sidecar.schedule" in err and schedule in err, err


@pytest.mark.parametrize(("min_samples", "schedule"), [
    (5, "initial=4"), (4, "initial=4"), (1001, "growth=2"), (1000, "growth=2"), (3, "initial=1_0"),
    (11, "initial=+1_0,growth=1.5"), (2, ""), (1, "initial=09"), (80, "initial=0100"), (101, "initial=0100"),
    (5, "initial=10000000000000000000"),
])
def test_min_samples_above_schedule_initial_refused(helm_bin: Path, tmp_path: Path, min_samples: int,
                                                     schedule: str) -> None:
    """More minSamples than a schedule's epoch 0 holds is never met: the sidecar refuses the pair
    at start (its pod would crash-loop), so the chart refuses it at render."""
    rc, err = template(helm_bin, {"sidecar": {"schedule": schedule, "minSamples": min_samples}}, tmp_path)
    if schedule and min_samples > Schedule.parse(schedule).initial:
        assert rc != 0, f"rendered minSamples {min_samples} with schedule {schedule!r}"
        assert "sidecar.minSamples" in err and "initial=" in err, err
    else:
        assert rc == 0, err


def test_sidecar_values_checked_in_webhook_profiles(helm_bin: Path, tmp_path: Path) -> None:
    """A profile's own sidecar values go through the same check (its pods would crash-loop)."""
    values = {"job": {"enabled": False},
              "webhook": {"enabled": True, "profiles": {"bad": {"sidecar": {"schedule": "initial=0"}}}}}
    rc, err = template(helm_bin, values, tmp_path)
    assert rc != 0 and "sidecar.schedule" in err, err


# --------------------------------------------------------------------------- mounts and names


@pytest.mark.parametrize("values", [
    {"sidecar": {"mountPath": "/dev/shm"}},
    {"sidecar": {"mountPath": "/dev/shm/"}},
    {"cache": {"readOnlyPath": "/dev/shm"}},
    {"cache": {"path": "/dev/shm"}},
    {"sidecar": {"mountPath": "/dev"}},
], ids=["mountPath", "mountPath-slash", "readOnlyPath", "cache-path", "above"])
def test_chart_path_at_dev_shm_refused(helm_bin: Path, tmp_path: Path, values: dict[str, Any]) -> None:
    """The Job's trainer has its shared memory (dshm) at /dev/shm: a chart mount there too would
    give it two mounts at one path."""
    rc, err = template(helm_bin, values, tmp_path)
    assert rc != 0, f"rendered {values}"
    assert "/dev/shm" in err, err


def test_extra_mount_at_mount_path_with_a_trailing_slash_refused(helm_bin: Path, tmp_path: Path) -> None:
    trainer = {"extraVolumes": [{"name": "x", "emptyDir": {}}],
               "extraVolumeMounts": [{"name": "x", "mountPath": "/mnt/epochfs"}]}
    rc, err = template(helm_bin, {"sidecar": {"mountPath": "/mnt/epochfs/"}, "trainer": trainer}, tmp_path)
    assert rc != 0, "rendered an extra mount at sidecar.mountPath"
    assert "/mnt/epochfs is a mount path of the chart" in err, err


@pytest.mark.parametrize("name", ["epochfs-ckpt", "epochfs-cache", "dshm"])
def test_extra_volume_with_a_chart_name_refused(helm_bin: Path, tmp_path: Path, name: str) -> None:
    rc, err = template(helm_bin, {"trainer": {"extraVolumes": [{"name": name, "emptyDir": {}}]}}, tmp_path)
    assert rc != 0, f"rendered an extra volume {name}"
    assert f'"{name}"' in err and "epochfs-" in err, err
    objs = render(helm_bin, with_remote({"trainer": {"extraVolumes": [{"name": "ckpt", "emptyDir": {}}]}}),
                  tmp_path)
    assert "ckpt" in {v["name"] for v in pod_spec(objs)["volumes"]}


# --------------------------------------------------------------------------- /tmp


def _tmp_limit(volumes: list[dict[str, Any]]) -> str:
    return str(next(v for v in volumes if v["name"] == "epochfs-tmp")["emptyDir"]["sizeLimit"])


def test_tmp_size_limit_is_a_value_of_the_job_and_the_webhook(helm_bin: Path, tmp_path: Path) -> None:
    """The trainer's /tmp (its HOME) and the sidecar's share one emptyDir: its size limit is
    trainer.tmpSizeLimit (1Gi by default), in the chart's Job and in every webhook profile."""
    assert _tmp_limit(pod_spec(render(helm_bin, with_remote({}), tmp_path))["volumes"]) == "1Gi"
    objs = render(helm_bin, with_remote({"trainer": {"tmpSizeLimit": "20Gi"}, "webhook": {"enabled": True}}),
                  tmp_path)
    assert _tmp_limit(pod_spec(objs)["volumes"]) == "20Gi"
    profiles = next(o for o in objs
                    if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-profiles"))
    for doc in profiles["data"].values():
        assert _tmp_limit(json.loads(doc)["volumes"]) == "20Gi"
    rc, err = template(helm_bin, {"trainer": {"tmpSizeLimit": "0"}}, tmp_path)
    assert rc != 0 and "tmpSizeLimit" in err, err
