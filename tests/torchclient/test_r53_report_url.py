"""A malformed ``EPOCHFS_REPORT_URL`` is an error at once wherever the torch client reads it.

Without ``http://`` the value used to be taken as "off" by the cut requests alone: on the folder view
(where those requests are what cuts an epoch) a trainer waited out its whole timeout with no hint,
while ``EpochLoader(report=True)`` raised at once for the same value. Now ``EpochDataset``,
``wait_for_epoch`` and both loaders with ``report=False`` raise the report's ValueError, which names
the variable, before any wait (issue B53, 2).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from epochfs.torchclient import ArrayLoader, EpochDataset, EpochLoader, wait_for_epoch
from epochfs.torchclient.cutask import sidecar_url_from_env
from epochfs.torchclient.plainfolder import publish_epoch

BAD = "127.0.0.1:47241"
SAYS = r"EPOCHFS_REPORT_URL must be an http\(s\) URL or 'off', got '127\.0\.0\.1:47241'"


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A published folder (the folder view's layout) holding epoch 0 only, and the malformed URL."""
    objects = tmp_path / "objects"
    objects.mkdir()
    np.save(objects / "a.npy", np.arange(4, dtype=np.float32))
    root = tmp_path / "view"
    publish_epoch(root, 0, {"a.npy": objects / "a.npy"})
    monkeypatch.setenv("EPOCHFS_REPORT_URL", BAD)
    return root


def test_the_cut_requests_refuse_a_url_without_scheme(folder: Path) -> None:
    with pytest.raises(ValueError, match=SAYS):
        sidecar_url_from_env()


def test_waiting_for_a_missing_epoch_raises_at_once(folder: Path) -> None:
    # timeout=1: before the fix the wait ran it out and raised TimeoutError, not the ValueError
    with pytest.raises(ValueError, match=SAYS):
        wait_for_epoch(folder, 1, timeout=1, progress=None)
    with pytest.raises(ValueError, match=SAYS):
        EpochDataset(folder, 1, timeout=1, progress=None)
    with pytest.raises(ValueError, match=SAYS):
        EpochDataset(folder, 0, progress=None)  # present: the setting is wrong all the same


@pytest.mark.parametrize("loader", [EpochLoader, ArrayLoader])
def test_the_loaders_refuse_it_with_report_off(folder: Path, loader: type) -> None:
    with pytest.raises(ValueError, match=SAYS):
        loader(folder, batch_size=1, report=False, progress=None)


def test_an_explicit_sidecar_url_does_not_read_the_variable(folder: Path) -> None:
    assert wait_for_epoch(folder, 0, sidecar_url=None, progress=None) == 0.0
