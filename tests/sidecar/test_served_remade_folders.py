"""Served opens are still counted after ``objects/`` is removed and made again.

fanotify marks inodes, not names: ``rm -rf <cache>/objects`` under a running sidecar drops the
marks with the folders, and the sampler's repair makes new folders of the same names (on ext4 often
with the same inode numbers). The counter's rescan used to skip a folder whose name it had marked
once, so every later open went uncounted (epochfs_served_samples_total stuck; reviewer J2.1).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from common import wait_until

from epochfs.sidecar.served import OpenCounter


@pytest.mark.skipif(os.geteuid() != 0, reason="fanotify needs CAP_SYS_ADMIN")
def test_a_folder_made_again_under_the_same_name_is_marked_again(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    names = ("ab", "cd")
    for name in names:
        (objects / name).mkdir(parents=True)
        (objects / name / f"{name}0").write_bytes(b"x" * 10)
    opens: list[int] = []
    counter = OpenCounter(objects_dir=objects, on_open=lambda samples, _nbytes: opens.append(samples),
                          precreate=False, gather_seconds=0.0)
    assert counter.start()
    try:
        (objects / "ab" / "ab0").read_bytes()
        wait_until(lambda: sum(opens) >= 1, timeout=20, what="the first open counted")
        assert counter.rescan() == 0, "nothing new: no folder is marked twice"

        shutil.rmtree(objects)  # what an operator's rm -rf does; then the sampler's repair
        for name in names:
            (objects / name).mkdir(parents=True)
            (objects / name / f"{name}1").write_bytes(b"y" * 20)
        assert counter.rescan() == len(names), "both folders are new inodes: marked again"
        assert counter.rescan() == 0

        (objects / "ab" / "ab1").read_bytes()
        (objects / "cd" / "cd1").read_bytes()
        wait_until(lambda: sum(opens) >= 3, timeout=20, what="the opens after the repair counted")
        assert sum(opens) == 3
    finally:
        counter.stop()
