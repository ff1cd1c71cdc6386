"""``epochfs bench served_opens`` compares as many passes on each side, interleaved, by their
medians. It took the best of ``--repeat`` watched passes against the best of 2 x ``--repeat``
unwatched ones (before and after) and printed "best of ``--repeat``" for both: the baseline had
twice the chances at a lucky pass."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

import pytest

from epochfs.benchmarks import _served_opens_plot as plot
from epochfs.benchmarks import served_opens


@pytest.mark.skipif(os.geteuid() != 0, reason="fanotify needs CAP_SYS_ADMIN")
def test_both_sides_get_as_many_interleaved_passes_and_medians(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run.json"
    assert served_opens.main(["--dir", str(tmp_path / "files"), "--files", "40", "--size", "4096",
                              "--repeat", "3", "--json", str(out)]) == 0
    [row] = json.loads(out.read_text())
    assert len(row["unwatched_s"]) == len(row["watched_s"]) == 3, row
    assert row["order"] == ["unwatched", "watched", "watched", "unwatched", "unwatched", "watched"]
    assert row["ratio_of_medians"] == pytest.approx(
        statistics.median(row["unwatched_s"]) / statistics.median(row["watched_s"]))
    assert row["opens"] == 120 and row["counted"] == 120  # a counter per watched pass: none merged
    text = capsys.readouterr().out
    assert "40 files of 4096 B, page cache warm, 3 passes each side, interleaved; medians [min-max]:" in text
    assert "best of" not in text
    [passes] = [line for line in text.splitlines() if line.startswith("  passes: ")]
    assert passes.count(" opens/s [") == 2, passes


def test_the_picture_labels_each_row_by_how_it_was_measured() -> None:
    new: dict[str, Any] = {"files": 40, "size": 4096, "repeat": 3, "unwatched_s": [0.1, 0.2, 0.3],
                           "watched_s": [0.2, 0.25, 0.4], "ratio_of_medians": 0.8, "counted": 120,
                           "opens": 120}
    old: dict[str, Any] = {"files": 40, "size": 4096, "repeat": 1, "unwatched_s": [0.1, 0.2],
                           "watched_s": [0.2], "ratio": 0.5, "counted": 40, "opens": 40}
    bars = plot.bars([new, old])
    assert [b.label for b in bars] == ["40 x 4 KiB, median of 3 passes each: every open counted",
                                       "40 x 4 KiB, best of 1: every open counted"]
    assert [b.ratio for b in bars] == [0.8, 0.5]
