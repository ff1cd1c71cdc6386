"""``epochfs status --cache`` says an epoch is pinned for both of the README's reasons (review r54).

The README defines *pinned* as "among the newest ``--keep-epochs`` or read within
``--in-use-seconds``"; the ``pinned`` column and ``pinned_epochs`` counted only the reads. With a
schedule-mode cache stuck on its kept epochs, status said "backpressure: YES (... cannot fit beside
the kept epochs (4-5) ...)" and showed epochs 4 and 5 ``pinned no``. Each epoch now says why it is
pinned: ``kept``, ``in use`` or both (JSON ``pinned_by``), and ``pinned``/``pinned_epochs`` count
either reason. Real processes: ``epochfs status`` and, for the report's case, ``epochfs sample`` and
``epochfs cut`` over a ``file://`` folder.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import admit, make_objects, open_store
from sampler_helpers import running_sampler

from epochfs.sidecar.status import read_stats

EPOCHFS = [sys.executable, "-m", "epochfs.sidecar.cli"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}


def _status(cache: Path, *flags: str) -> str:
    proc = subprocess.run([*EPOCHFS, "status", "--cache", str(cache), *flags], capture_output=True,
                          text=True, env=_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _pin_cells(text: str) -> dict[int, str]:
    """The ``pinned`` cell of each row of the epochs table, by epoch (the words after the bytes)."""
    rows = text.splitlines()
    header = next(i for i, line in enumerate(rows) if line.lstrip().startswith("epoch "))
    assert rows[header].split()[-1] == "pinned", text
    cells = {}
    for line in rows[header + 1:]:
        m = re.match(r"\s*(\d+)\s+\d+\s+\d+\s+\d+\s+[\d.]+ \S+ (.+)$", line)
        if m is None:
            break
        cells[int(m.group(1))] = m.group(2).strip()
    return cells


def test_status_names_kept_and_in_use_epochs_pinned(tmp_path: Path) -> None:
    """Four live epochs, --keep-epochs 2, a read recorded on epochs 0 and 3 (no sampler retires
    epoch 1, so every case shows): 0 in use, 1 not pinned, 2 kept, 3 both."""
    cache = tmp_path / "cache"
    with open_store(cache, keep_epochs=2, in_use_seconds=300.0) as store:
        for n in range(4):
            admit(store, make_objects(2, 100, start=2 * n))
            assert store.cut() == n
        assert store.record_read(0) and store.record_read(3)
    doc = json.loads(_status(cache, "--json"))
    assert doc["pinned_epochs"] == [0, 2, 3], doc
    assert [e["pinned"] for e in doc["epochs"]] == [True, False, True, True], doc["epochs"]
    assert [e["pinned_by"] for e in doc["epochs"]] == [["in use"], [], ["kept"], ["kept", "in use"]]
    text = _status(cache)
    assert _pin_cells(text) == {0: "in use", 1: "no", 2: "kept", 3: "kept, in use"}, text


@pytest.mark.long
def test_the_kept_epochs_a_stuck_schedule_names_are_shown_pinned(tmp_path: Path) -> None:
    """The report's case: 40 objects of 4 KiB, --capacity 64Ki, --keep-epochs 2, a schedule whose
    windows grow until one cannot fit beside the kept epochs; cut until status says so, then the
    epochs it names are pinned ``kept`` (nothing reads them: --in-use-seconds 1)."""
    data, cache = tmp_path / "data", tmp_path / "cache"
    data.mkdir()
    for i in range(40):
        (data / f"o{i:02d}.bin").write_bytes(bytes([i]) * 4096)
    stuck = re.compile(r"cannot fit beside the kept epochs \((\d+)-(\d+)\)")

    tried: dict[str, float] = {"fetched": -1.0, "at": 0.0}

    def cut_until_stuck() -> re.Match[str] | None:
        # Polled through the status command's own reading, in this process: a plain `epochfs
        # status` beside a running sampler waits a second for its rates (read once, below).
        doc = read_stats(cache=cache, mount=None)
        m = stuck.search(doc["backpressure_reason"] or "")
        # Each window is larger than the last: a cut is worth trying once the sampler fetched
        # more since the last try (or a while after it, in case).
        if m is None and (doc["fetched_total"] != tried["fetched"]
                          or time.monotonic() - tried["at"] > 2):
            tried.update(fetched=doc["fetched_total"], at=time.monotonic())
            subprocess.run([*EPOCHFS, "cut", "--cache", str(cache)], capture_output=True, env=_env(),
                           timeout=120)  # refused while the window is incomplete: tried again
        return m

    with running_sampler(cache, f"file://{data}", "--capacity", "64Ki", "--keep-epochs", "2",
                         "--schedule", "initial=8,growth=1.15", "--in-use-seconds", "1"):
        m = wait_until(cut_until_stuck, timeout=240, interval=0.1, what="backpressure on the kept epochs")
        kept = list(range(int(m.group(1)), int(m.group(2)) + 1))
        text = _status(cache)
        doc = json.loads(_status(cache, "--json"))
    shown = stuck.search(text)  # the table's own backpressure line names the same kept epochs
    assert shown is not None and shown.groups() == m.groups(), text
    assert doc["backpressure"] and "kept epochs" in doc["backpressure_reason"], doc
    assert [e["epoch"] for e in doc["epochs"]] == kept, doc["epochs"]
    assert doc["pinned_epochs"] == kept, doc
    assert all(e["pinned"] and "kept" in e["pinned_by"] for e in doc["epochs"]), doc["epochs"]
    cells = _pin_cells(text)
    assert set(cells) == set(kept) and all(c.startswith("kept") for c in cells.values()), text
