"""Start-up recovery removes a killed writer's temp files that carry this process's own pid
(review 38, finding 8).

A container restart starts a fresh PID namespace, so the restarted sampler often has the pid of
the one that was killed. A cut killed between writing ``epochs/.epoch-N.members.<pid>.<tid>.tmp``
and its rename left a temp that recovery took for a live writer's (its pid is in ``/proc``: it is
this process) and kept for good. Recovery runs before this process starts any writer, so such a
temp is the predecessor's and goes, counted, as the small files' temps (``hwm`` here) already did;
another live process's temp stays.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from epochfs.sidecar.store import Store, hwm, memberformat


def test_recovery_removes_the_temps_with_this_process_pid_and_keeps_another_live_one(
        tmp_path: Path) -> None:
    root = tmp_path / "cache"
    with contextlib.closing(Store(root, create=True)) as store:
        own_members = memberformat.temp(root, 3)  # the name a cut of epoch 3 in this process writes
        assert f".{os.getpid()}." in own_members.name
        own_members.write_bytes(b"x" * 4096)
        own_hwm = root / f".{hwm.HWM_NAME}.{os.getpid()}.tmp"
        own_hwm.write_bytes(b"y")
        live = own_members.with_name(own_members.name.replace(f".{os.getpid()}.", f".{os.getppid()}."))
        live.write_bytes(b"z")  # a writer in another live process (the one that started this one)

        report = store.recover(integrity="ok")

        assert not own_members.exists()
        assert not own_hwm.exists()
        assert live.exists()
        assert report.temp_removed == 2
