"""The downloader's list of its temp files: one look at a time, however many workers track.

Each worker lists its download's temp (so that a stop removes what a worker left); past a mark
the list is looked over and the names gone forgotten. The look stats every name, outside the
lock; the workers that tracked meanwhile found the mark passed as well and each looked over the
same names (a fetch of 1,500 objects on 32 workers: 38,000 stats, 36 per download).
"""

from __future__ import annotations

import threading
from pathlib import Path, PosixPath

import pytest

from epochfs.sidecar import download
from epochfs.sidecar.download import Downloader, RetryPolicy
from epochfs.sidecar.remote import open_remote
from epochfs.sidecar.store import Store


class _Looked:
    """What the looks saw once ``armed``: every stat counted, the first one held until ``go`` is
    set."""

    def __init__(self) -> None:
        self.armed = False
        self.stats = 0
        self.first = threading.Event()
        self.go = threading.Event()
        self.lock = threading.Lock()


def _names(looked: _Looked) -> type[PosixPath]:
    class Counted(PosixPath):
        def exists(self, *args: object, **kwargs: object) -> bool:
            with looked.lock:
                looked.stats += looked.armed
                first = looked.armed and looked.stats == 1
            if first:
                looked.first.set()
                assert looked.go.wait(30), "the test never let the first look go on"
            return super().exists()

    return Counted


@pytest.fixture
def downloader(tmp_path: Path) -> Downloader:
    (tmp_path / "data").mkdir()
    return Downloader(store=Store(tmp_path / "cache", create=True),
                      remote=open_remote(f"file://{tmp_path / 'data'}"),
                      retry=RetryPolicy(attempts=1, base=0.0, cap=0.0), stop=threading.Event())


def test_workers_that_track_while_a_look_runs_do_not_look_again(
        downloader: Downloader, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(download, "PRUNE_AT", 8)
    downloader._prune_at = 8
    looked = _Looked()
    name = _names(looked)
    temps = [name(tmp_path / f"t{i}.part") for i in range(15)]
    for t in temps:
        t.touch()
    for t in temps[:7]:
        downloader._track(t)
    assert set(downloader.active_temps()) == set(temps[:7])  # a look: none of them looked at yet
    gone = temps[:3]
    for t in gone:
        t.unlink()
    downloader._prune_at = 8
    looked.armed = True
    looker = threading.Thread(target=downloader._track, args=(temps[7],))
    looker.start()  # the eighth: the look is due, and held at its first stat
    assert looked.first.wait(30)
    for t in temps[8:]:  # seven more workers track while it looks
        downloader._track(t)
    looked.go.set()
    looker.join(30)
    assert not looker.is_alive()
    assert looked.stats == 7, "one look, over the seven names listed before the last look"
    assert set(downloader.active_temps()) == set(temps[3:])  # the gone ones forgotten


def test_a_temp_listed_before_its_file_is_made_is_not_forgotten(
        downloader: Downloader, monkeypatch: pytest.MonkeyPatch) -> None:
    """As a download does: its temp listed, then the file made. The look made due by a listing
    ran before that worker's file existed, and forgot it (one temp at every look): the file
    was then written, and a stop, which removes what is listed, left it behind."""
    monkeypatch.setattr(download, "PRUNE_AT", 8)
    downloader._prune_at = 8
    made = []
    for _ in range(100):
        temp = downloader.store.files.temp_path()
        downloader._track(temp)
        temp.touch()
        made.append(temp)
    assert sorted(downloader.active_temps()) == sorted(made)
    for temp in made[:60]:
        temp.unlink()
    for _ in range(100):  # looks enough to forget the gone ones: one stat per download
        temp = downloader.store.files.temp_path()
        downloader._track(temp)
        temp.touch()
        made.append(temp)
    assert sorted(downloader.active_temps()) == sorted(made[60:])
