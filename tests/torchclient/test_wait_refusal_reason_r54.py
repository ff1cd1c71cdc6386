"""A wait that ends without the epoch says the sidecar's reason and the remedy that can work (r54).

Why: asked for epoch 5 while the newest was 0, the sidecar refuses (only the next epoch is cut on
request; a jump must be asked for). ``wait=False`` then advised "pass wait=True", a wait that can
only end in a TimeoutError, and that TimeoutError dropped the refusal it had in hand. Real parts,
in-process: a store, its folder view published in a thread, and the sidecar's endpoints answering
``/v1/cut`` on 127.0.0.1, found through ``EPOCHFS_REPORT_URL`` as in a pod.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from fuse_helpers import admit, make_objects, open_store
from prometheus_client import CollectorRegistry

from epochfs.sidecar import cutrequest, metrics
from epochfs.sidecar.endpoints import Endpoints
from epochfs.sidecar.folderview import FolderPublisher
from epochfs.sidecar.store import Store
from epochfs.torchclient import EpochDataset, wait_for_epoch

REFUSAL = "only the next epoch (1) is cut on request"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """A cache of 6 samples (3 make an epoch)."""
    s = open_store(tmp_path / "cache", min_samples=3, keep_epochs=2, in_use_seconds=300)
    admit(s, make_objects(6, 100))
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def view(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The store's folder view, kept up to date, and its sidecar's ``/v1/cut`` on loopback."""
    folder = tmp_path / "shared" / "view"
    folder.parent.mkdir()
    publisher = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir, grace=False)
    publisher.recover()
    stop = threading.Event()

    def publish() -> None:
        while not stop.wait(0.02):
            publisher.step()

    ep = Endpoints(host="127.0.0.1", port=0, health=lambda: (True, {}), ready=lambda: (True, {}),
                   registry=None, on_client_report=lambda r: None,
                   on_cut=lambda req: cutrequest.answer(store, req),
                   metrics=metrics.EndpointMetrics(registry=CollectorRegistry()))
    ep.start()
    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    monkeypatch.setenv("EPOCHFS_REPORT_URL", f"http://127.0.0.1:{ep.port}/v1/client-report")
    try:
        yield folder
    finally:
        stop.set()
        thread.join()
        ep.stop()


def test_wait_false_on_a_refused_jump_says_why_and_advises_jump(view: Path) -> None:
    wait_for_epoch(view, 0, timeout=20, progress=None)  # epoch 0 cut: the next one is 1
    with pytest.raises(FileNotFoundError) as caught:
        EpochDataset(view, 5, wait=False, progress=None)
    said = str(caught.value)
    assert REFUSAL in said and "pass jump=True" in said, said
    assert "wait=True" not in said, said  # no wait asks for this cut
    assert EpochDataset(view, 5, wait=False, jump=True, progress=None, decode="bytes").epoch == 5


def test_the_timeout_keeps_the_sidecars_refusal(view: Path) -> None:
    wait_for_epoch(view, 0, timeout=20, progress=None)
    with pytest.raises(TimeoutError) as caught:
        EpochDataset(view, 5, timeout=1, progress=None)
    said = str(caught.value)
    assert said.startswith("epoch 5 did not appear under"), said
    assert REFUSAL in said and "pass jump=True" in said, said


def test_wait_false_on_a_queued_epoch_still_advises_waiting(store: Store, view: Path) -> None:
    store.configure(dataclasses.replace(store.policy(), min_samples=10))  # above the 6 cached
    with pytest.raises(FileNotFoundError) as caught:
        wait_for_epoch(view, 0, wait=False, progress=None)
    said = str(caught.value)
    assert "the sidecar says: epoch 0 is queued" in said and "pass wait=True" in said, said
    assert "jump=True" not in said, said
