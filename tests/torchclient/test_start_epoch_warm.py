"""A new training run on a kept (warm) cache whose epoch 0 has retired, and /readyz's word on it.

Why: epoch numbers are never reused, and a hostPath cache outlives its pod (docs/kubernetes.md:
a replacement pod, a second release sharing the folder, start warm), so there epoch 0 is gone
for good and a loop written ``for epoch in range(N): loader.epoch(epoch)`` fails at once. The
documented way (docs/torchclient.md, "A new run on a kept cache") starts at ``start_epoch(root)``,
the newest live epoch; /readyz names that epoch (``first_epoch``) and says whether it is there
(``epoch0``). Real folder-view sidecars (``epochfs sidecar --view folder``): one fills the cache
and cuts until epoch 0 retires, a second starts on the same cache, as the replacement pod does;
the ranks' agreement runs on two real gloo ranks.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from common import wait_until
from folderview_helpers import folder_sidecar, owned_dir, write_remote
from warm_cache_helpers import OBJECTS, live_epochs, warm_folder_cache

from epochfs.torchclient.layout import epoch_name, list_epochs
from epochfs.torchclient.plainfolder import publish_epoch

sys.path.insert(0, str(Path(__file__).parent))
from two_ranks import run_two_ranks


def _readyz(car: Any) -> tuple[int, dict[str, Any]]:
    code, body = car.get("/readyz")
    return code, json.loads(body)


def _read_from_start(root: Path, epochs: int) -> dict[int, int]:
    """The documented loop of a new run: samples delivered per epoch, from ``start_epoch(root)``."""
    from epochfs.torchclient import EpochLoader, start_epoch

    counts: dict[int, int] = {}
    with EpochLoader(root, batch_size=2, num_workers=0, decode="bytes", progress=None, timeout=60,
                     report=False) as loader:
        first = start_epoch(root)
        for epoch in range(first, first + epochs):
            counts[epoch] = sum(len(batch) for batch in loader.epoch(epoch, jump=epoch == first))
    return counts


def test_a_new_run_on_a_kept_cache_reads_from_its_newest_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    from epochfs.torchclient import EpochLoader, start_epoch

    with owned_dir() as base:
        remote = warm_folder_cache(base)
        with folder_sidecar(base, remote) as car:  # the replacement pod's sidecar, on the kept cache
            monkeypatch.setenv("EPOCHFS_REPORT_URL", f"http://127.0.0.1:{car.port}/v1/client-report")
            newest = live_epochs(car.mount)[-1]
            assert newest > 0 and 0 not in list_epochs(car.mount), list_epochs(car.mount)
            code, doc = _readyz(car)
            assert code == 200 and doc["epoch0"] is True and doc["first_epoch"] == newest, doc
            assert start_epoch(car.mount) == newest
            with EpochLoader(car.mount, batch_size=2, num_workers=0, decode="bytes", progress=None,
                             report=False) as loader, pytest.raises(FileNotFoundError, match="not live"):
                list(loader.epoch(0))  # why the helper exists: epoch 0 never comes back
            counts = _read_from_start(car.mount, epochs=2)
            # the newest epoch as kept, then the next one, cut on request as on a new cache
            assert counts == {newest: len(OBJECTS), newest + 1: len(OBJECTS)}, counts


def test_readyz_on_a_new_cache_names_epoch_0(monkeypatch: pytest.MonkeyPatch) -> None:
    from epochfs.torchclient import start_epoch

    with owned_dir() as base:
        remote = base / "remote"
        write_remote(remote, OBJECTS)
        with folder_sidecar(base, remote, extra=("--min-samples", "100"), ready=False) as car:
            doc = wait_until(lambda: _readyz(car)[1] if car.get("/readyz")[0] == 503 and
                             "samples cached" in _readyz(car)[1].get("reason", "") else None,
                             timeout=60, what="/readyz waiting for epoch 0's samples")
            assert doc["epoch0"] is False and doc["first_epoch"] == 0, doc
            assert doc["reason"].startswith("epoch 0: "), doc
        with folder_sidecar(base, remote) as car:  # ready: epoch 0 can be cut, none exists yet
            monkeypatch.setenv("EPOCHFS_REPORT_URL", f"http://127.0.0.1:{car.port}/v1/client-report")
            code, doc = _readyz(car)
            assert code == 200 and doc["epoch0"] is True and doc["first_epoch"] == 0, doc
            assert list_epochs(car.mount) == [] and start_epoch(car.mount) == 0
            counts = _read_from_start(car.mount, epochs=1)  # epoch 0 is cut on the loader's request
            # from what is cached then: the first sidecar may have stopped before it had them all
            members = sum(1 for p in (car.mount / epoch_name(0)).rglob("*") if p.is_file())
            assert counts == {0: members} and 0 < members <= len(OBJECTS), (counts, members)


def test_start_epoch_refuses_a_root_that_is_not_there(tmp_path: Path) -> None:
    from epochfs.torchclient import start_epoch

    with pytest.raises(FileNotFoundError, match="is the sidecar's mount there"):
        start_epoch(tmp_path / "missing")
    (tmp_path / "pod" / "view" / ".epochfs").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="pass that as the root"):
        start_epoch(tmp_path / "pod")


def test_ranks_agree_on_the_largest_start(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    objects.mkdir()
    (objects / "s0.raw").write_bytes(np.zeros(1, np.int32).tobytes())
    for node, epochs in ((0, (3, 4)), (1, (0, 1))):
        for n in epochs:
            publish_epoch(tmp_path / f"node{node}", n, {"s0.raw": objects / "s0.raw"})
    run_two_ranks(Path(__file__).parent / "start_epoch_ranks.py", [str(tmp_path)])
    outs = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert outs == [{"own": 4, "agreed": 4}, {"own": 1, "agreed": 4}], outs

