"""The trainer's wait for an epoch after the first says why it can never be cut, and names the
first cut's own number.

Why: ``status.json`` carries ``next_epoch.warning`` when the next epoch can never be cut (a
``--min-samples`` above what the complete listing holds for this node), but the waiting line and
the ``TimeoutError`` read only the first epoch's: a trainer waiting for epoch 1 (with ``sample`` +
``mount``, or ``EPOCHFS_REPORT_URL=off``, where no cut request's answer brings the reason) waited
its whole timeout and was told "pending cuts [1]". And after an index reset that lost every
epoch, the first cut is above the old numbers: the line said "epoch 0" for it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from epochfs.torchclient import EpochDataset
from epochfs.torchclient.describe import describe_root

WARNING = ("--min-samples 1000 is more than the 300 objects the complete listing holds for this "
           "node: epoch 1 is never cut; lower --min-samples")


def _status(root: Path, doc: dict[str, object]) -> None:
    (root / ".epochfs").mkdir(parents=True, exist_ok=True)
    (root / ".epochfs" / "status.json").write_text(json.dumps(doc))


def test_a_wait_for_epoch_1_that_can_never_be_cut_says_why(tmp_path: Path) -> None:
    root = tmp_path / "mnt"
    (root / "epoch-0").mkdir(parents=True)
    (root / "epoch-0" / "a.bin").write_bytes(b"x")
    _status(root, {"samples": 300, "latest_epoch": 0, "pending_cuts": [1],
                   "next_epoch": {"epoch": 1, "samples": 300, "target": 1000, "warning": WARNING}})
    assert f"next epoch: {WARNING}" in describe_root(root)
    with pytest.raises(TimeoutError, match="epoch 1 is never cut; lower --min-samples"):
        EpochDataset(root, 1, timeout=0.1, progress=None)


def test_the_first_cut_after_an_index_reset_is_named_by_its_number(tmp_path: Path) -> None:
    root = tmp_path / "mnt"
    _status(root, {"samples": 4, "latest_epoch": None, "pending_cuts": [],
                   "first_epoch": {"epoch": 7, "samples": 4, "target": 10}})
    assert "sidecar: epoch 7: 4/10 samples cached (40%)" in describe_root(root)
