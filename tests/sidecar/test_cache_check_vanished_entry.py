"""The start's write check (:func:`epochfs.sidecar.volumes.unwritable_entry`) lists ``epochs/``
and asks ``access(2)`` of each entry; another process of the sidecar (the sampler cutting, the
publisher writing a members file) renames its temp files there all the while. An entry gone
between the listing and the question is no refusal: a publisher restarted while the sampler cut
exited 2 with "cannot write in it: …/epochs/.epoch-147.members.<pid>.<tid>.tmp: permission
denied" (found by tests/folderview/test_folderview_crash.py under load)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from epochfs.sidecar.store import Store
from epochfs.sidecar.store.memberformat import MEMBERS_DIR
from epochfs.sidecar.volumes import unwritable_entry


def _churn(folder: Path, stop: threading.Event, made: list[int]) -> None:
    """Temp files written and renamed over their final name, as a members file is."""
    i = 0
    while not stop.is_set():
        temp = folder / f".epoch-{i % 50}.members.{os.getpid()}.{i}.tmp"
        temp.write_bytes(b"x")
        os.replace(temp, folder / f"epoch-{i % 50}.members")
        i += 1
    made.append(i)


def test_an_entry_renamed_away_during_the_check_is_not_unwritable(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    Store(cache, create=True).close()
    folder = cache / MEMBERS_DIR
    folder.mkdir(exist_ok=True)
    stop, made = threading.Event(), []
    churner = threading.Thread(target=_churn, args=(folder, stop, made))
    churner.start()
    refused: list[Path] = []
    try:
        for _ in range(400):
            if (entry := unwritable_entry(cache)) is not None:
                refused.append(entry)
    finally:
        stop.set()
        churner.join()
    assert made and made[0] > 100, "the churn ran alongside the checks"
    assert not refused, f"{len(refused)} checks refused a cache root may write, e.g. {refused[0]}"
