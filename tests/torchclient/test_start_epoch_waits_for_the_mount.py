"""``start_epoch`` on a mount point the sidecar has not mounted yet waits for the view.

Why: a trainer started beside the sidecar rather than after it (the chart's legacy sidecar, a
plain pod) called ``start_epoch`` on an empty mount point and got 0 at once; on a kept cache whose
newest epoch is 3, ``loader.epoch(0)`` then failed ("has retired"). Now the empty folder is waited
for, as the loaders wait for an epoch, and the answer is the kept cache's newest epoch. A real
store with epochs 0-3 (two kept), the real ``epochfs mount`` started while ``start_epoch`` waits.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import cut_epochs, mounted, open_store


def _kept_cache(cache: Path) -> None:
    with open_store(cache, keep_epochs=2) as store:
        cut_epochs(store, 4)


def test_a_start_before_the_mount_answers_the_kept_caches_newest_epoch(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from epochfs.torchclient import start_epoch

    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    _kept_cache(cache)
    mnt.mkdir()
    answer: list[int | BaseException] = []
    said: list[str] = []

    def start() -> None:
        try:
            answer.append(start_epoch(mnt))  # as the docs call it
        except BaseException as e:  # handed to the test's thread
            answer.append(e)

    def heard() -> bool:
        said.append(capfd.readouterr().err)
        return "waiting for the sidecar's view" in "".join(said) or bool(answer)

    thread = threading.Thread(target=start)
    thread.start()
    try:
        wait_until(heard, timeout=20, what="start_epoch's waiting line")
        assert not answer, f"answered {answer} before the sidecar mounted anything"
        with mounted(cache, mnt):
            thread.join(timeout=30)
            assert answer == [3], answer
    finally:
        thread.join(timeout=30)


def test_without_wait_an_empty_mount_point_is_the_first_cut_at_once(tmp_path: Path) -> None:
    from epochfs.torchclient import start_epoch

    (tmp_path / "mnt").mkdir()
    assert start_epoch(tmp_path / "mnt", wait=False) == 0


def test_an_empty_folder_that_never_becomes_a_view_times_out(tmp_path: Path) -> None:
    from epochfs.torchclient import start_epoch

    (tmp_path / "mnt").mkdir()
    with pytest.raises(TimeoutError, match="no epochfs view under"):
        start_epoch(tmp_path / "mnt", timeout=0.3, progress=None)
