"""A root that exists but is not the mount raises at once, naming the path to give instead.

Given the folder above the view (the pod volume ``/data`` when the sidecar's ``--mount`` is
``/data/view``), or an epoch folder (``epoch-N``, ``latest``) as the root, the client used to wait
out its whole timeout saying "no epoch folders yet". Both views have ``.epochfs/`` at their root, so
such a root is told apart from the mount; a brand-new mount before epoch 0 (``.epochfs/`` already
there) and an empty folder (a mount point before the sidecar mounts it) still wait, the latter
with a line that says it is no mount yet (issue B53, 3). Real sidecars, FUSE and folder view.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from common import wait_until
from shards_helpers import tar_shard
from sidecar_helpers import running_sidecar

from epochfs.torchclient import EpochDataset, wait_for_epoch

NOT_A_MOUNT = "not an epochfs mount (yet); is the sidecar's mount there?"
"""What the waiting line and the TimeoutError add under a folder with neither epochs nor .epochfs/."""

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]

BOUND = 5.0
"""A timeout that ends the test where the client waits instead of raising (the failure before the fix)."""


@pytest.mark.parametrize("view", ["fuse", "folder"])
def test_a_root_that_is_not_the_mount_raises_at_once(tmp_path: Path, view: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    remote = tmp_path / "remote"
    remote.mkdir()
    for s in range(3):
        (remote / f"train-{s:05d}.tar").write_bytes(tar_shard(s, 2))
    pod = tmp_path / "pod"
    pod.mkdir()
    mount = pod / "view"
    with running_sidecar(tmp_path, remote=f"file://{remote}", endpoint="", mount=mount,
                         extra=("--view", view, "--min-samples", "1")) as car:
        assert (mount / ".epochfs").is_dir(), f"the {view} view has .epochfs/ at its root"
        monkeypatch.setenv("EPOCHFS_REPORT_URL", f"{car.base}/v1/client-report")  # the folder view's cuts
        EpochDataset(mount, 0, progress=None, timeout=60).release()  # the mount itself works
        with pytest.raises(FileNotFoundError, match=rf"{pod} is not the mount .* but {mount} is: pass that"):
            EpochDataset(pod, 0, progress=None, timeout=BOUND)
        latest = [mount / "latest"] if view == "fuse" else []  # the folder view has no latest link
        for epoch_folder in (mount / "epoch-0", *latest):
            said = rf"{epoch_folder} is an epoch folder of the mount at {mount}, not the mount: pass {mount}"
            with pytest.raises(FileNotFoundError, match=said):
                wait_for_epoch(epoch_folder, 1, progress=None, timeout=BOUND, sidecar_url=None)
        assert car.proc.poll() is None


def test_a_new_mount_before_epoch_0_still_waits(tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    remote.mkdir()  # nothing to fetch: epoch 0 never comes
    with running_sidecar(tmp_path, remote=f"file://{remote}", endpoint="", expect_ready=False) as car:
        wait_until(lambda: (car.mount / ".epochfs").is_dir(), timeout=60, what="the mount's .epochfs/")
        lines: list[str] = []
        with pytest.raises(TimeoutError) as waited:
            wait_for_epoch(car.mount, 0, progress=lines.append, timeout=1, sidecar_url=None)
        assert NOT_A_MOUNT not in str(waited.value) and lines and NOT_A_MOUNT not in lines[0]


def test_an_empty_folder_waits_and_says_it_is_no_mount_yet(tmp_path: Path) -> None:
    lines: list[str] = []
    with pytest.raises(TimeoutError) as waited:
        wait_for_epoch(tmp_path, 0, progress=lines.append, timeout=1, sidecar_url=None)
    assert NOT_A_MOUNT in str(waited.value) and NOT_A_MOUNT in lines[0]
