"""A sidecar exports ``child`` series for the children it runs, and only those.

The supervisor's metrics created the ``sampler`` and ``fuse`` series up front whatever the view, so
a folder-view sidecar (children: sampler and publisher) exported ``epochfs_child_up{child="fuse"}
0`` for ever beside ``child="publisher"`` 1: a dashboard or a ``child_up == 0`` query saw a dead
FUSE server that never existed. A real ``epochfs sidecar --view folder`` over a file:// remote.
"""

from __future__ import annotations

import os
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sidecar_helpers import running_sidecar

from epochfs.sidecar import metrics

FAMILIES = {"epochfs_child_up": "epochfs_child_up", "epochfs_child_restarts": "epochfs_child_restarts_total"}


def _children(text: str) -> dict[str, dict[str, float]]:
    """Family -> child label -> value, of the child families in an exposition."""
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name in FAMILIES:
            found[family.name] = {s.labels["child"]: s.value for s in family.samples
                                  if s.name == FAMILIES[family.name]}
    return found


def test_a_folder_view_sidecar_exports_no_fuse_child(tmp_path: Path) -> None:
    data = tmp_path / "data" / "train"
    data.mkdir(parents=True)
    for i in range(3):
        (data / f"{i}.bin").write_bytes(os.urandom(1024))
    with running_sidecar(tmp_path, remote=(tmp_path / "data").as_uri(), endpoint="", mount=tmp_path / "view",
                         extra=("--view", "folder", "--kube-reporting", "0")) as car:
        found = _children(car.metrics())
    assert found["epochfs_child_up"] == {"sampler": 1.0, "publisher": 1.0}, found
    assert found["epochfs_child_restarts"] == {"sampler": 0.0, "publisher": 0.0}, found


def test_the_series_exist_from_the_start_for_the_children_named() -> None:
    """Before any start: up 0 and restarts 0 (so increase() counts a first restart), per child named."""
    sidecar = metrics.SidecarMetrics(registry=CollectorRegistry(), children=("sampler", "publisher"))
    found = _children(generate_latest(sidecar.registry).decode())
    assert found == {"epochfs_child_up": {"sampler": 0.0, "publisher": 0.0},
                     "epochfs_child_restarts": {"sampler": 0.0, "publisher": 0.0}}
