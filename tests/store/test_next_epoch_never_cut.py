"""A ``--min-samples`` the next epoch can never meet is said for that epoch too, not only for epoch 0.

A node whose complete listing holds 5 keys cut epoch 0; restarted with ``--min-samples 10`` (a Helm
upgrade that keeps the cache), epoch 1 was waited on in silence: no warning in the sampler's log,
status said nothing, and a trainer's wait said only "epoch 1 is queued". Now the store's
``next_epoch`` carries the warning (``status.json``), the sampler logs it once, and the answer to a
cut request names it. A real store, samples admitted as the sampler admits them."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest
from fuse_helpers import open_store
from store_helpers import put, sid_of

from epochfs.sidecar import cutrequest
from epochfs.sidecar.cutrequest import CutRequest
from epochfs.sidecar.status import render
from epochfs.sidecar.store import CatalogRow, Store, epochs

WARNING = ("--min-samples 10 is more than the 5 objects the complete listing holds for this node: "
           "epoch 1 is never cut; lower --min-samples")


def _cut_epoch_0_of_five(store: Store) -> None:
    keys = [f"train/{i}.bin" for i in range(5)]
    store.add_catalog([CatalogRow(k, sid_of(k), 100, "v", rank=i) for i, k in enumerate(keys)])
    store.finalize_catalog()
    for key in keys:
        put(store, key, 100)
    assert store.cut() == 0


def test_a_restart_with_an_unmeetable_min_samples_says_the_next_epoch_is_never_cut(
        tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    with open_store(tmp_path / "cache") as store:
        _cut_epoch_0_of_five(store)
        store.configure(dataclasses.replace(store.policy(), min_samples=10))  # the restart
        monkeypatch.setattr(epochs, "SAY_EVERY", 0.0)  # every call looks: the log still says it once
        with caplog.at_level(logging.WARNING, logger="epochfs.store"):
            for _ in range(3):
                assert store.process_cut_requests() == []
        said = [r.getMessage() for r in caplog.records if "never cut" in r.getMessage()]
        assert said == [f"epoch 1: {WARNING}"]
        code, doc = cutrequest.answer(store, CutRequest(1))
        assert (code, doc["state"]) == (202, "waiting")
        assert doc["message"] == f"epoch 1 is queued, but never cut: {WARNING}"
        assert store.stats().next_epoch == {"epoch": 1, "samples": 5, "target": 10, "warning": WARNING}
        assert store.stats().to_json()["next_epoch"] == store.stats().next_epoch, "status.json shows it"
        shown = render(store.stats().to_json())
        assert f"  epoch 1: 5/10 samples; WARNING: {WARNING}" in shown.splitlines(), shown


def test_a_meetable_min_samples_shows_no_next_epoch_warning(tmp_path: Path) -> None:
    with open_store(tmp_path / "cache") as store:
        _cut_epoch_0_of_five(store)
        store.configure(dataclasses.replace(store.policy(), min_samples=5))
        assert store.stats().next_epoch is None
        code, doc = cutrequest.answer(store, CutRequest(1))
        assert code == 200, doc
