"""Values the chart must refuse at render time, each with a message naming what to set: a RoleBinding
to the namespace's default ServiceAccount, a cache budget above what its volume holds, a tmpfs cache
larger than the sidecar's memory limit, chart mount paths that coincide or nest, a volume size whose
bytes overflow, and a health port on the rendezvous port. Rendered by the real helm binary."""

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
    one,
    pod_spec,
    render,
    with_remote,
)

GI = 1024**3
PI = 1024**5


def template(helm_bin: Path, values: dict[str, Any], tmp: Path,
             *args: str) -> tuple[int, str, str]:
    proc = helm(helm_bin, "template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args,
                values=with_remote(values), tmp=tmp, check=False)
    return proc.returncode, proc.stdout, proc.stderr


def refused(helm_bin: Path, values: dict[str, Any], tmp: Path, *args: str) -> str:
    rc, _, err = template(helm_bin, values, tmp, *args)
    assert rc != 0, f"rendered: {values}"
    return err


# --------------------------------------------------------------------------- ServiceAccount


def test_rbac_is_never_bound_to_the_default_service_account(helm_bin: Path, tmp_path: Path) -> None:
    """serviceAccount.create=false and no name: the pods run as the namespace's `default`
    ServiceAccount, which every other pod there shares; binding the Role to it would hand them all
    events and pods patch. Refused with the values to set."""
    err = refused(helm_bin, {"serviceAccount": {"create": False}}, tmp_path)
    assert "serviceAccount.name" in err and "default" in err, err
    # A named account is bound; without the Role (kube reporting off or rbac.create=false) the
    # default account is fine.
    objs = render(helm_bin, with_remote({"serviceAccount": {"create": False, "name": "trainers"}}), tmp_path)
    assert one(objs, "RoleBinding")["subjects"][0]["name"] == "trainers"
    assert pod_spec(objs)["serviceAccountName"] == "trainers"
    for off in ({"rbac": {"create": False}}, {"kubeReporting": {"enabled": False}}):
        objs = render(helm_bin, with_remote({"serviceAccount": {"create": False}, **off}), tmp_path)
        assert not [o for o in objs if o["kind"] == "RoleBinding"]
        assert pod_spec(objs)["serviceAccountName"] == "default"


# --------------------------------------------------------------------------- the cache budget


@pytest.mark.parametrize("volume_type", ["emptyDir", "ephemeral"])
def test_a_capacity_above_90_percent_of_the_volume_is_refused(helm_bin: Path, tmp_path: Path,
                                                              volume_type: str) -> None:
    """The webhook refuses epochfs.io/capacity over 90% of the profile's volume; the chart's own
    cache.capacity gets the same rule and the same numbers (the rest of the volume holds the
    index, its WAL and the downloads in flight; a full emptyDir gets the pod evicted)."""
    for capacity in ("19Gi", "21474836480", "1.5T", "25g"):
        err = refused(helm_bin, {"cache": {"capacity": capacity,
                                           "volume": {"type": volume_type, "size": "20Gi"}}}, tmp_path)
        assert (f"cache.capacity: {capacity} is more than the cache volume allows: at most "
                f"{20 * GI * 9 // 10} bytes, 90% of its {20 * GI} (cache.volume.size 20Gi)") in err, err
    for capacity in ("18Gi", "19327352832", "1.5Gi", "19.3G"):
        objs = render(helm_bin, with_remote({"cache": {"capacity": capacity,
                                                       "volume": {"type": volume_type, "size": "20Gi"}}}),
                      tmp_path)
        assert env_of(container(pod_spec(objs), "epochfs"))["EPOCHFS_CAPACITY"] == capacity


def test_a_hostpath_capacity_is_not_bounded_by_its_size(helm_bin: Path, tmp_path: Path) -> None:
    """For hostPath, cache.volume.size is only where the default budget comes from: no volume has
    that size, so a larger capacity is the user's to choose (the webhook checks no size there)."""
    values = {"cache": {"capacity": "100Gi", "volume": {"type": "hostPath", "size": "20Gi"}}}
    objs = render(helm_bin, with_remote(values), tmp_path)
    assert env_of(container(pod_spec(objs), "epochfs"))["EPOCHFS_CAPACITY"] == "100Gi"


# --------------------------------------------------------------------------- a tmpfs cache


def test_a_memory_cache_must_fit_under_the_sidecars_memory_limit(helm_bin: Path, tmp_path: Path) -> None:
    """Pages of a memory-backed emptyDir count against the limit of the container that writes
    them: a 20Gi tmpfs under the default 2Gi limit gets the sidecar OOM-killed once the cache
    passes 2Gi."""
    err = refused(helm_bin, {"cache": {"volume": {"medium": "Memory"}}}, tmp_path)
    assert "sidecar.resources.limits.memory" in err and "cache.volume.size" in err, err
    assert "2Gi" in err and "20Gi" in err, err
    for limit in ("24Gi", 24 * GI, "25e9", "24576Mi"):
        values = {"cache": {"volume": {"medium": "Memory", "size": "20Gi"}},
                  "sidecar": {"resources": {"limits": {"memory": limit}}}}
        render(helm_bin, with_remote(values), tmp_path)
    for limit in ("19Gi", "20e9", 19 * GI):
        values = {"cache": {"volume": {"medium": "Memory", "size": "20Gi"}},
                  "sidecar": {"resources": {"limits": {"memory": limit}}}}
        assert "sidecar.resources.limits.memory" in refused(helm_bin, values, tmp_path)
    # A small tmpfs under the default limit, and no limit at all, render.
    render(helm_bin, with_remote({"cache": {"volume": {"medium": "Memory", "size": "1Gi"}}}), tmp_path)
    render(helm_bin, with_remote({"cache": {"volume": {"medium": "Memory"}},
                                  "sidecar": {"resources": {"limits": None}}}), tmp_path)


# --------------------------------------------------------------------------- mount paths


@pytest.mark.parametrize(("values", "first", "second"), [
    ({"cache": {"path": "/mnt/epochfs/cache"}}, "sidecar.mountPath", "cache.path"),
    ({"cache": {"path": "/mnt/epochfs"}}, "sidecar.mountPath", "cache.path"),
    ({"cache": {"path": "/var/cache/epochfs-ro"}}, "cache.path", "cache.readOnlyPath"),
    ({"cache": {"path": "/data", "readOnlyPath": "/data/ro"}}, "cache.path", "cache.readOnlyPath"),
    ({"cache": {"path": "/tmp"}}, "cache.path", "/tmp"),
    ({"cache": {"readOnlyPath": "/tmp/"}}, "cache.readOnlyPath", "/tmp"),
    ({"cache": {"readOnlyPath": "/mnt/epochfs/ro"}}, "sidecar.mountPath", "cache.readOnlyPath"),
    ({"cache": {"path": "/"}}, "sidecar.mountPath", "cache.path"),
    ({"sidecar": {"mountPath": "/var/cache"}}, "sidecar.mountPath", "cache.path"),
])
def test_the_charts_own_mount_paths_never_coincide_or_nest(helm_bin: Path, tmp_path: Path,
                                                           values: dict[str, Any], first: str,
                                                           second: str) -> None:
    """cache.path inside sidecar.mountPath would put the writable cache inside the volume the
    trainer mounts (and under the Bidirectional mount); any two equal or nested chart mounts
    shadow one another or need a mount point made inside a read-only volume."""
    err = refused(helm_bin, values, tmp_path)
    assert first in err and second in err and "inside" in err, err


def test_chart_paths_side_by_side_render(helm_bin: Path, tmp_path: Path) -> None:
    """Paths apart render, also inside /tmp: a writable scratch volume where a mount point can be
    made (the process-level pod tests put every path under one temporary folder)."""
    for base in ("/data", "/tmp/epochfs-pod"):
        values = {"cache": {"path": f"{base}/cache", "readOnlyPath": f"{base}/cache-ro"},
                  "sidecar": {"mountPath": f"{base}/mnt"}}
        render(helm_bin, with_remote(values), tmp_path)


# --------------------------------------------------------------------------- schema and ports


def test_a_volume_size_whose_bytes_overflow_is_refused(helm_bin: Path, tmp_path: Path) -> None:
    """1000Pi is more bytes than an int64 holds once the 90% budget is computed: the schema bounds
    the digits of each unit; the largest size it takes renders an exact positive budget."""
    for size in ("1000Pi", "10000P", "1000000Ti", "10000000000000000000"):
        err = refused(helm_bin, {"cache": {"volume": {"size": size}}}, tmp_path)
        assert "/cache/volume/size" in err, err
    for size, nbytes in (("999Pi", 999 * PI), ("999999999999999999", 999999999999999999)):
        values = {"cache": {"volume": {"type": "hostPath", "size": size}}}
        objs = render(helm_bin, with_remote(values), tmp_path)
        assert env_of(container(pod_spec(objs), "epochfs"))["EPOCHFS_CAPACITY"] == str(nbytes * 9 // 10)


def test_the_health_port_may_not_be_the_rendezvous_port(helm_bin: Path, tmp_path: Path) -> None:
    """Both containers share the pod's network: torch.distributed could not bind MASTER_PORT."""
    err = refused(helm_bin, {"sidecar": {"healthPort": 29500}, "nodes": 2}, tmp_path)
    assert "sidecar.healthPort" in err and "job.rendezvousPort" in err, err
    err = refused(helm_bin, {"sidecar": {"healthPort": 9000}, "job": {"rendezvousPort": 9000}}, tmp_path)
    assert "sidecar.healthPort" in err and "job.rendezvousPort" in err, err


def test_the_waiting_threshold_takes_a_set_flag(helm_bin: Path, tmp_path: Path) -> None:
    """`--set metrics.prometheusRule.trainersWaitingThreshold=0.3` hands the chart the string "0.3"."""
    for flag in ("--set", "--set-string"):
        rc, out, err = template(helm_bin, {"metrics": {"prometheusRule": {"enabled": True}}}, tmp_path,
                                flag, "metrics.prometheusRule.trainersWaitingThreshold=0.3")
        assert rc == 0, err
        assert "> 0.3\n" in out and "more than 30% of their time" in out
    for bad in ("1", "0", "1.5", "0.0", "-0.1", "a quarter", "0.3x"):
        rc, _, err = template(helm_bin, {"metrics": {"prometheusRule": {"enabled": True}}}, tmp_path,
                              "--set-string", f"metrics.prometheusRule.trainersWaitingThreshold={bad}")
        assert rc != 0 and "trainersWaitingThreshold" in err, (bad, err)
