"""The chart's Job refuses an ephemeral-storage limit its emptyDir cache would pass.

The kubelet evicts a pod whose disk-backed emptyDirs, writable layers and logs pass the sum of
its containers' ephemeral-storage limits, wherever one container sets one. A limit put on the
sidecar for its own scratch (2Gi, say) beside a 20Gi emptyDir cache rendered silently, and the
pod was evicted once the cache passed it, again after every restart. Rendered by the real helm
binary; every limit the sum holds is accepted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helm_helpers import CHART, NAMESPACE, RELEASE, helm, with_remote

GI = 1 << 30


def template(helm_bin: Path, values: dict[str, Any], tmp: Path) -> tuple[int, str]:
    proc = helm(helm_bin, "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                "--kube-version", "1.31.0", values=with_remote(values), tmp=tmp, check=False)
    return proc.returncode, proc.stderr


def limits(sidecar: str | None, trainer: str | None) -> dict[str, Any]:
    values: dict[str, Any] = {"cache": {"volume": {"size": "20Gi"}}, "trainer": {"tmpSizeLimit": "1Gi"}}
    if sidecar is not None:
        values["sidecar"] = {"resources": {"limits": {"memory": "2Gi", "ephemeral-storage": sidecar}}}
    if trainer is not None:
        values["trainer"]["resources"] = {"limits": {"memory": "8Gi", "ephemeral-storage": trainer}}
    return values


@pytest.mark.parametrize(("sidecar", "trainer", "total"), [
    ("2Gi", None, 2 * GI),                 # a limit meant for the sidecar's own scratch
    (None, "20Gi", 20 * GI),               # the trainer's, which holds the cache but not /tmp
    ("10Gi", "10Gi", 20 * GI),             # the sum counts, and is still 1Gi short
    ("21474836480", None, 20 * GI),        # a plain byte count
])
def test_limits_below_the_cache_and_scratch_refused(helm_bin: Path, tmp_path: Path, sidecar: str | None,
                                                    trainer: str | None, total: int) -> None:
    rc, err = template(helm_bin, limits(sidecar, trainer), tmp_path)
    assert rc != 0, "rendered a pod its filling cache would get evicted"
    assert f"ephemeral-storage limit is {total} bytes" in err, err
    assert "cache.volume.size 20Gi" in err and "trainer.tmpSizeLimit 1Gi" in err, err


@pytest.mark.parametrize(("sidecar", "trainer"), [
    (None, None),        # no limit: nothing to pass
    ("21Gi", None),      # exactly the cache and the scratch
    ("1Gi", "20Gi"),     # the sum holds both
    ("30Gi", "1Gi"),
])
def test_limits_that_hold_the_cache_and_scratch_render(helm_bin: Path, tmp_path: Path, sidecar: str | None,
                                                       trainer: str | None) -> None:
    rc, err = template(helm_bin, limits(sidecar, trainer), tmp_path)
    assert rc == 0, err


@pytest.mark.parametrize("volume", [
    {"type": "emptyDir", "size": "20Gi", "medium": "Memory"},   # a tmpfs counts against memory
    {"type": "ephemeral", "size": "20Gi"},                       # a PVC is not ephemeral storage
    {"type": "hostPath", "size": "20Gi"},
])
def test_caches_that_are_not_node_disk_emptydirs_not_counted(helm_bin: Path, tmp_path: Path,
                                                             volume: dict[str, str]) -> None:
    values = limits("2Gi", None)
    values["cache"]["volume"] = volume
    values["sidecar"]["resources"]["limits"]["memory"] = "40Gi"
    rc, err = template(helm_bin, values, tmp_path)
    assert rc == 0, err
