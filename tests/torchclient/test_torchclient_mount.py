"""The torch client on a real mount: EpochLoader with 2 workers over three epochs of a running sidecar.

The sidecar samples moto's S3 server; the loader asks for each epoch at its boundary (a lookup of
``epoch-N`` that cuts it), and every byte its workers read must equal the remote object at that key.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from common import S3Server, put_objects, random_objects
from sidecar_helpers import running_sidecar
from torchclient_helpers import check_loader_over_growing_epochs

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]


def test_epoch_loader_reads_every_byte_through_the_mount(s3: S3Server, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    objects = random_objects(48, 20_000)
    put_objects(s3, "train-data", objects)
    with running_sidecar(tmp_path, remote="s3://train-data", endpoint=s3.endpoint,
                         extra=("--capacity", "4Mi", "--min-samples", "8")) as car:
        monkeypatch.setenv("EPOCHFS_REPORT_URL", f"{car.base}/v1/client-report")
        history = check_loader_over_growing_epochs(car.mount, epochs=(0, 1, 2), num_workers=2)
        # The loader reported what it delivered; the sidecar exports it.
        delivered = sum(h.samples for h in history)
        assert car.metric("epochfs_client_samples_total") == delivered
        assert car.metric("epochfs_client_bytes_total") == sum(h.bytes for h in history)
        assert [h.epoch for h in history] == [0, 1, 2]
        assert all(h.complete for h in history)
        sizes = [h.files for h in history]
        assert sizes[0] >= 8 and sizes == sorted(sizes), f"epochs must not shrink here: {sizes}"
        for n in (0, 1, 2):
            root = car.mount / f"epoch-{n}"
            for path in root.rglob("*"):
                if path.is_file():
                    rel = path.relative_to(root).as_posix()
                    assert path.read_bytes() == objects[rel], f"epoch-{n}/{rel} differs from the remote"
