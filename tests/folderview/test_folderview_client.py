"""The torch client on the folder view: it asks the sidecar for epoch N when ``epoch-N/`` is missing.

In-process and real: a store, the folder publisher stepping in a thread, and :class:`Endpoints`
answering ``/v1/cut`` with the store's rule on 127.0.0.1; the client finds it through
``EPOCHFS_REPORT_URL``, as in a pod. Checked: an epoch appears because the client asked (no lookup
sees anything on a folder), only the next epoch unless ``jump=True``, an epoch that is gone fails at
once with the sidecar's reason, ``wait=False`` gets an epoch it can have, EpochLoader reads
epochs so and names the running epoch in its reports (heartbeats while it pauses), which keeps it
pinned; without a sidecar the client waits as on any folder.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from common import free_port, wait_until
from fuse_helpers import admit, make_objects, open_store
from prometheus_client import CollectorRegistry

from epochfs.sidecar import cutrequest, metrics
from epochfs.sidecar.endpoints import ClientReport, Endpoints
from epochfs.sidecar.folderview import FolderPublisher
from epochfs.sidecar.served_pins import ReadRecords
from epochfs.sidecar.store import Store
from epochfs.torchclient import EpochDataset, EpochLoader, report, wait_for_epoch
from epochfs.torchclient.cutask import ask_cut, sidecar_url_from_env
from epochfs.torchclient.report import ClientReporter


@dataclass
class FolderSidecar:
    store: Store
    folder: Path
    port: int
    reports: list[ClientReport]
    asked: list[cutrequest.CutRequest]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@pytest.fixture
def sidecar(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FolderSidecar]:
    """A store with 6 samples, its folder view kept up to date, and the endpoints on loopback."""
    store = open_store(tmp_path / "cache", min_samples=3, keep_epochs=2, in_use_seconds=300)
    admit(store, make_objects(6, 100))
    folder = tmp_path / "shared" / "view"
    folder.parent.mkdir()
    publisher = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir, grace=False)
    publisher.recover()
    stop = threading.Event()

    def publish() -> None:
        while not stop.wait(0.02):
            publisher.step()

    asked: list[cutrequest.CutRequest] = []
    reports: list[ClientReport] = []

    def on_cut(req: cutrequest.CutRequest) -> tuple[int, dict[str, object]]:
        asked.append(req)
        return cutrequest.answer(store, req)

    reads = ReadRecords(store)  # what the sidecar's supervisor records a report's epochs with

    def on_report(r: ClientReport) -> None:
        reports.append(r)
        reads.client_epochs(r.epochs, client=r.client)

    ep = Endpoints(host="127.0.0.1", port=0, health=lambda: (True, {}), ready=lambda: (True, {}),
                   registry=None, on_client_report=on_report, on_cut=on_cut,
                   metrics=metrics.EndpointMetrics(registry=CollectorRegistry()))
    ep.start()
    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    monkeypatch.setenv("EPOCHFS_REPORT_URL", f"http://127.0.0.1:{ep.port}/v1/client-report")
    try:
        yield FolderSidecar(store, folder, ep.port, reports, asked)
    finally:
        stop.set()
        thread.join()
        ep.stop()
        store.close()


def test_the_url_comes_from_the_report_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EPOCHFS_REPORT_URL", "http://127.0.0.1:8123/v1/client-report")
    assert sidecar_url_from_env() == "http://127.0.0.1:8123"
    for off in ("off", "", "none"):
        monkeypatch.setenv("EPOCHFS_REPORT_URL", off)
        assert sidecar_url_from_env() is None
    monkeypatch.delenv("EPOCHFS_REPORT_URL")
    assert sidecar_url_from_env() == "http://127.0.0.1:8080"  # the report's default
    assert ask_cut(f"http://127.0.0.1:{free_port()}", 0) is None  # nobody there: just wait


def test_a_dataset_asks_for_its_epoch_and_gets_it(sidecar: FolderSidecar) -> None:
    assert sidecar.store.epochs() == []
    lines: list[str] = []
    ds = EpochDataset(sidecar.folder, 0, decode="bytes", timeout=20, progress=lines.append)
    assert len(ds) == 6 and ds.source == "manifest"
    assert sidecar.asked[0] == cutrequest.CutRequest(0)
    assert [e.epoch for e in sidecar.store.epochs()] == [0]
    assert bytes(ds[0].numpy()) == (sidecar.folder / "epoch-0" / ds.files[0]).read_bytes()
    ds.release()


def test_only_the_next_epoch_unless_a_jump_is_asked(sidecar: FolderSidecar) -> None:
    lines: list[str] = []
    with pytest.raises(TimeoutError, match="epoch 3 did not appear"):
        EpochDataset(sidecar.folder, 3, timeout=1.5, progress=lines.append)
    assert sidecar.store.epochs() == []  # a request far ahead cut nothing
    assert any("jump=1" in line for line in lines), lines  # the sidecar's reason is shown
    ds = EpochDataset(sidecar.folder, 3, decode="bytes", timeout=20, progress=None, jump=True)
    assert len(ds) == 6 and [e.epoch for e in sidecar.store.epochs()] == [3]
    assert sidecar.asked[-1] == cutrequest.CutRequest(3, jump=True)
    # Epochs 0-2 were never cut: asking for one fails at once with the reason, not at the timeout.
    started = time.monotonic()
    with pytest.raises(FileNotFoundError, match=r"epoch 1 will not appear.*never cut"):
        EpochDataset(sidecar.folder, 1, timeout=60, progress=None)
    assert time.monotonic() - started < 10
    ds.release()


def test_a_queued_epoch_is_cut_once_its_condition_holds(sidecar: FolderSidecar, tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache")  # the same cache, opened again: raise min-samples
    store.configure(dataclasses.replace(store.policy(), min_samples=10))
    result: list[object] = []
    t = threading.Thread(target=lambda: result.append(wait_for_epoch(sidecar.folder, 0, timeout=30,
                                                                     progress=None)))
    t.start()
    wait_until(store.pending_cuts, timeout=10, what="the client's request queued")
    assert [n for n, _ in store.pending_cuts()] == [0]
    admit(store, make_objects(4, 100, start=6))  # the sampler would do this: the cut follows
    assert [n for n, _ in store.process_cut_requests()] == [0]
    t.join(30)
    assert result and isinstance(result[0], float)
    store.close()


def test_wait_false_gets_an_epoch_it_can_have(sidecar: FolderSidecar) -> None:
    assert wait_for_epoch(sidecar.folder, 0, wait=False, progress=None) >= 0
    # Epoch 5, four past the next: waiting cannot cut it, so no "pass wait=True" but the sidecar's
    # reason and the jump that can.
    with pytest.raises(FileNotFoundError, match=r"only the next epoch \(1\).*pass jump=True"):
        wait_for_epoch(sidecar.folder, 5, wait=False, progress=None)


def test_without_a_sidecar_the_client_waits_as_on_any_folder(sidecar: FolderSidecar,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EPOCHFS_REPORT_URL", "off")
    with pytest.raises(TimeoutError):
        wait_for_epoch(sidecar.folder, 0, timeout=0.5, progress=None)
    assert sidecar.asked == [] and sidecar.store.epochs() == []


def test_epoch_loader_reads_epochs_and_names_them_in_reports(sidecar: FolderSidecar) -> None:
    with EpochLoader(sidecar.folder, batch_size=2, num_workers=0, decode="bytes", progress=None,
                     shuffle=False) as loader:
        for n in (0, 1):
            before = time.time()
            batches = 0
            for _batch in loader.epoch(n):
                batches += 1
                if batches == 1:  # mid-epoch: the report names the running epoch
                    def named(n: int = n) -> bool:
                        return loader.reporter.flush() and any(n in r.epochs for r in sidecar.reports)

                    wait_until(named, timeout=10, what=f"a report naming epoch {n}")
            assert batches == 3
            assert any(n in r.epochs for r in sidecar.reports), sidecar.reports
            last_read = float(sidecar.store._ix.query("SELECT last_read FROM epochs WHERE n=?", (n,))[0][0])
            assert last_read >= before
        assert [e.epoch for e in sidecar.store.epochs()] == [0, 1]
        assert [r.epoch for r in sidecar.asked] == [0, 1]
    # After the epoch, reports no longer name it.
    sidecar.reports.clear()
    reporter = ClientReporter(url=f"{sidecar.url}/v1/client-report")
    reporter.add(samples=1, nbytes=1, wait_seconds=0)
    assert reporter.flush() and sidecar.reports[-1].epochs == ()


def test_a_paused_reader_heartbeats_its_epoch(sidecar: FolderSidecar,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    reporter = ClientReporter(url=f"{sidecar.url}/v1/client-report", interval=3600)
    reporter.reading(4)
    assert reporter.flush()  # nothing delivered, but an epoch is read and no report was sent yet
    assert sidecar.reports[-1] == ClientReport(0, 0, 0.0, (4,), reporter.client)
    count = len(sidecar.reports)
    assert reporter.flush() and len(sidecar.reports) == count  # the next heartbeat is not due
    monkeypatch.setattr(report, "HEARTBEAT", 0.0)
    assert reporter.flush() and len(sidecar.reports) == count + 1
    reporter.done(4)
    assert reporter.flush() and len(sidecar.reports) == count + 2  # the end is said: it releases epoch 4
    assert sidecar.reports[-1] == ClientReport(0, 0, 0.0, (), reporter.client)
    assert reporter.flush() and len(sidecar.reports) == count + 2  # nothing read: nothing more to say
    reporter.close()
