"""The served counter's rescan reads ``objects/`` again only when it changed.

Why: the supervisor rescans at every tick (4 a second) for fan-out folders that appeared or were
made again; each full scan (256 stats and the fanotify group's fdinfo parsed) cost ~6 ms, 2-3% of
a core for a sidecar doing nothing. A folder whose (device, inode, mtime) is the one last scanned
has the same entries; one changed within the kernel's coarse timestamp tick of a scan is scanned
again at every look until its stamp is old enough to trust. Real fanotify marks (root).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from epochfs.sidecar.served import OpenCounter

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="fanotify needs CAP_SYS_ADMIN")


@pytest.fixture
def counter(tmp_path: Path) -> Iterator[OpenCounter]:
    objects = tmp_path / "objects"
    for name in ("ab", "cd"):
        (objects / name).mkdir(parents=True)
    c = OpenCounter(objects_dir=objects, on_open=lambda samples, nbytes: None, precreate=False,
                    gather_seconds=0.0)
    assert c.start()
    try:
        yield c
    finally:
        c.stop()


def _scans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The folders os.scandir is asked to read from now on (the real scandir answers)."""
    seen: list[str] = []
    real = os.scandir

    def scandir(path):  # type: ignore[no-untyped-def]
        seen.append(os.fspath(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    return seen


def _age(folder: Path, seconds: float) -> None:
    """Date the folder's last change ``seconds`` back (as if it had not changed since)."""
    when = time.time_ns() - int(seconds * 1e9)
    os.utime(folder, ns=(when, when))


def test_an_unchanged_objects_folder_is_not_scanned_again(counter: OpenCounter,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    objects = counter.objects_dir
    _age(objects, 10)
    assert counter.rescan() == 0  # its stamp moved: scanned once, nothing new
    scans = _scans(monkeypatch)
    assert [counter.rescan() for _ in range(20)] == [0] * 20
    assert scans == [], f"{len(scans)} scans of an unchanged folder"
    (objects / "ef").mkdir()
    assert counter.rescan() == 1 and len(scans) == 1


def test_a_change_in_the_same_timestamp_tick_as_the_scan_is_found(counter: OpenCounter) -> None:
    objects = counter.objects_dir
    (objects / "ef").mkdir()
    assert counter.rescan() == 1
    scanned = os.stat(objects).st_mtime_ns
    (objects / "f0").mkdir()  # inside the same tick of the kernel's coarse clock, as it may be:
    os.utime(objects, ns=(scanned, scanned))  # the folder's stamp is the one scanned
    assert counter.rescan() == 1, "a recent stamp is scanned again whatever it says"
