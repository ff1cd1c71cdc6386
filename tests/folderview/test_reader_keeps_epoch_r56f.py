"""A reporting reader keeps its epoch on the folder view whatever ``--in-use-seconds``.

Why: without FUSE the sidecar learns that an epoch is read only from the torch client's reports and
its cut requests. Until the first report names the epoch it is held by the publisher's grace alone
(``--in-use-seconds`` from its showing); a report ``interval`` (2 s) later came after a window of
1 s, and with later epochs cut meanwhile (``--keep-epochs 1``) the epoch retired under the reader.
So the client names a new epoch at once (``torchclient/report.py``), and the sidecar dates the read
a cut request records ahead as it dates a report's (``sidecar/cutrequest.py``).

Real processes: an unprivileged ``epochfs sidecar --view folder`` over a ``file://`` remote, the
real ``EpochLoader`` with its reports on, real HTTP cut requests.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import random_objects, wait_until
from folderview_helpers import cut, folder_sidecar, last_read, owned_dir, write_remote
from sidecar_helpers import Sidecar

from epochfs.sidecar.served_pins import CLIENT_AHEAD
from epochfs.torchclient import EpochLoader

pytestmark = pytest.mark.skipif(os.geteuid() == 0 and not os.path.exists("/usr/bin/setpriv"),
                                reason="needs setpriv to drop root")

SAMPLES = 36
WINDOW = ("--in-use-seconds", "1", "--keep-epochs", "1", "--min-samples", str(SAMPLES))
STEP = 0.3
"""Seconds of the slow trainer's step per batch (its workload, not a wait for anything): twelve
batches span about four windows and two report intervals."""


def path_and_bytes(path: str) -> tuple[str, bytes]:
    """The decoder: the sample's path with its bytes (checked against the remote's)."""
    with open(path, "rb") as f:
        return path, f.read()


def cut_and_show(car: Sidecar, n: int) -> None:
    """Cut epoch ``n`` on request and wait until the folder shows it."""
    wait_until(lambda: cut(car, f"epoch={n}")[0] == 200, timeout=60, what=f"epoch {n} cut")
    wait_until(lambda: (car.mount / f"epoch-{n}").is_dir(), timeout=30, what=f"epoch-{n}/ shown")


@contextlib.contextmanager
def watching(watch: Watch) -> Iterator[None]:
    """Stop ``watch`` on the way out, however the read ends."""
    try:
        yield
    finally:
        watch.stop()


class Watch:
    """Polls ``folder`` until stopped and keeps every moment ``epoch-N/`` was missing."""

    def __init__(self, folder: Path, n: int) -> None:
        self.path = folder / f"epoch-{n}"
        self.missing: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            if not self.path.is_dir():
                self.missing.append(time.monotonic())

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)


def test_a_reporting_loader_keeps_its_epoch_while_later_ones_are_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    with owned_dir() as base:
        remote = base / "remote"
        objects = random_objects(SAMPLES, 256, seed=56)
        write_remote(remote, objects)
        with folder_sidecar(base, remote, extra=WINDOW) as car:
            monkeypatch.setenv("EPOCHFS_REPORT_URL", f"{car.base}/v1/client-report")
            read: dict[str, bytes] = {}
            watch = Watch(car.mount, 0)  # started at the first batch: epoch-0/ is there then
            loader = EpochLoader(str(car.mount), batch_size=3, num_workers=0, decode=path_and_bytes,
                                 progress=None, shuffle=False, retry_seconds=2.0, collate_fn=list)
            with watching(watch), loader:
                for number, batch in enumerate(loader.epoch(0)):
                    if number == 0:  # mid-epoch: two more epochs, each enough to retire this one
                        watch.start()
                        cut_and_show(car, 1)
                        cut_and_show(car, 2)
                    for path, data in batch:
                        read[os.path.relpath(path, car.mount / "epoch-0")] = data
                    assert (car.mount / "epoch-0").is_dir(), f"epoch-0/ retired after batch {number}"
                    time.sleep(STEP)  # the training step: the slow trainer's workload
            assert not watch.missing, f"epoch-0/ was missing {len(watch.missing)} times during the read"
            assert read == objects


def test_a_cut_request_dates_its_read_as_far_ahead_as_a_report() -> None:
    with owned_dir() as base:
        remote = base / "remote"
        write_remote(remote, random_objects(8, 64, seed=57))
        with folder_sidecar(base, remote, extra=("--min-samples", "8")) as car:
            cut_and_show(car, 0)
            wait_until(lambda: last_read(car.cache, 0) > 0, timeout=30, what="epoch 0's grace recorded")
            asked = time.time()
            assert cut(car, "epoch=0")[0] == 200  # live: the client about to read it asked
            assert last_read(car.cache, 0) >= asked + CLIENT_AHEAD - 1.0
