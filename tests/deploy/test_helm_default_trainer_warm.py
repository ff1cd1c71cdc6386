"""The chart's default trainer command (a smoke test) on a kept cache whose epoch 0 has retired.

Why: a hostPath cache outlives its pod (docs/kubernetes.md recommends it: a replacement pod, or
a second release sharing the folder, "starts warm"), and epoch numbers are never reused, so there
epoch 0 is gone for good: a default that only asks for ``epoch-0`` was refused (410 gone) and
exited 1 on every such pod. The command the chart (and the example parent chart) renders must
read the epoch a new run reads there, the newest live one (``latest/``). Rendered by the real helm
binary, run against a real ``epochfs sidecar --view folder`` started on a cache that an earlier
sidecar filled and cut until epoch 0 retired (:func:`warm_folder_cache`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from folderview_helpers import folder_sidecar, owned_dir
from helm_helpers import env_of
from test_helm_default_trainer_folder import trainer_of
from warm_cache_helpers import OBJECTS, live_epochs, warm_folder_cache

from epochfs.torchclient.layout import list_epochs


@pytest.mark.long
@pytest.mark.parametrize("where", ["chart", "example"])
def test_default_trainer_reads_the_newest_epoch_of_a_kept_cache(helm_bin: Path, tmp_path: Path,
                                                                  where: str) -> None:
    trainer = trainer_of(helm_bin, tmp_path, where)
    command, env = str(trainer["command"][2]), env_of(trainer)
    with owned_dir() as base:
        remote = warm_folder_cache(base)
        with folder_sidecar(base, remote) as car:
            newest = live_epochs(car.mount)[-1]
            assert 0 not in list_epochs(car.mount) and newest > 0, list_epochs(car.mount)
            report = urlsplit(str(env["EPOCHFS_REPORT_URL"]))._replace(netloc=f"127.0.0.1:{car.port}")
            run_env = {**os.environ, "HOME": str(base), "EPOCHFS_MOUNT": str(car.mount),
                       "EPOCHFS_REPORT_URL": urlunsplit(report)}
            proc = subprocess.run([sys.executable, "-c", command], capture_output=True, text=True,
                                  timeout=120, env=run_env)
            assert proc.returncode == 0, proc.stderr
            assert proc.stdout.startswith(f"{car.mount} "), proc.stdout
            # the view's entries (no epoch-0 among them), then the newest epoch's: one folder, train/
            assert "'epoch-0'" not in proc.stdout and f"'epoch-{newest}'" in proc.stdout, proc.stdout
            assert proc.stdout.rstrip().endswith(" 1 ['train']"), proc.stdout
            assert len(list((car.mount / f"epoch-{newest}" / "train").iterdir())) == len(OBJECTS)
