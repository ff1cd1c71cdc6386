"""A kept (warm) cache whose epoch 0 has retired, as a replacement pod or a second release meets it.

Why: a hostPath cache outlives its pod (docs/kubernetes.md, "hostPath cache folders", "Node drain
and pod deletion"), and epoch numbers are never reused, so the first sidecar of a new pod on it
finds epochs that a new trainer did not read, and none numbered 0. :func:`warm_folder_cache`
makes that state for real: a folder-view sidecar that fetches every sample, epochs cut with the
real ``epochfs cut`` until epoch 0 has retired (gone from the store and from the folder), then
stopped; the caller starts the next sidecar on the same ``base`` (:func:`folder_sidecar`).
"""

from __future__ import annotations

from pathlib import Path

from common import wait_until
from folderview_helpers import cli, folder_sidecar, write_remote

from epochfs.torchclient.layout import list_epochs, read_status

OBJECTS = {f"train/{i:02d}.npy": bytes([i]) * 64 for i in range(6)}
"""Six small samples: every epoch of the warm cache holds all of them."""

RETIRE_QUICKLY = ("--keep-epochs", "1", "--in-use-seconds", "1", "--retire-grace", "1")
"""The first sidecar's settings: only the newest epoch pinned, no read keeps one longer than a
second, so epoch 0 retires as soon as newer epochs are cut."""


def live_epochs(mount: Path) -> list[int]:
    """The live epochs the sidecar's ``status.json`` lists ([] while it has none or no document)."""
    status = read_status(mount) or {}
    return [int(e["epoch"]) for e in status.get("epochs") or []]


def warm_folder_cache(base: Path, *, cuts: int = 3) -> Path:
    """Fill ``base``'s cache from a ``file://`` remote with :data:`OBJECTS`, cut epochs 0 to
    ``cuts - 1`` and wait until epoch 0 has retired; returns the remote. The sidecar is stopped
    (SIGTERM, exit 0) before this returns, as a drained pod's is."""
    remote = base / "remote"
    write_remote(remote, OBJECTS)
    with folder_sidecar(base, remote, extra=RETIRE_QUICKLY) as car:
        wait_until(lambda: (read_status(car.mount) or {}).get("samples") == len(OBJECTS), timeout=60,
                   what="every sample cached")
        for _ in range(cuts):
            cli("--log-level", "WARNING", "cut", "--cache", str(car.cache))
        newest = cuts - 1
        wait_until(lambda: live_epochs(car.mount) and min(live_epochs(car.mount)) > 0
                   and live_epochs(car.mount)[-1] == newest and 0 not in list_epochs(car.mount),
                   timeout=60, what="epoch 0 retired from the store and the folder")
    return remote
