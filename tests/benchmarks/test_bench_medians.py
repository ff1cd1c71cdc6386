"""Benchmarks report medians with their spread, never the best run alone; ``0`` for a file size
skips it. Real runs at toy sizes (seconds): their numbers mean nothing, what they report does.

The mount benchmark's per-open figure was the minimum of 7 passes and its ratio one of minimums;
members_files gave the best of ``--repeat``; ``mount --big 0`` ended in a bare ``KeyError: 0``
(an empty epoch 0 is not cut), where folderview documents ``0: skip`` for the same flags.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from epochfs.benchmarks import members_files, mount

needs_fuse = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                                reason="the mount benchmark mounts: needs root and /dev/fuse")
SPREAD = r"\d+\.\d+ \[\d+\.\d+-\d+\.\d+\]"
"""``median [min-max]``."""


def test_members_files_gives_medians_with_their_spread(capsys: pytest.CaptureFixture[str]) -> None:
    assert members_files.main(["--members", "200", "--repeat", "3", "--encoders", "sql"]) == 0
    out = capsys.readouterr().out
    assert "median [min-max] of 3" in out and "best" not in out, out
    assert re.search(rf"^ +200 sql +{SPREAD} +{SPREAD} +\d+\.\d\d +\d+\.\d$", out, re.M), out


def test_members_files_schedule_gives_the_cuts_median(capsys: pytest.CaptureFixture[str]) -> None:
    assert members_files.main(["--members", "200", "--repeat", "3", "--schedule"]) == 0
    out = capsys.readouterr().out
    assert "the cut's part median [min-max] of 3" in out, out
    assert re.search(rf"^ +200 cut +{SPREAD} +{SPREAD} +\d+\.\d$", out, re.M), out


@needs_fuse
def test_mount_per_open_is_a_median_with_its_spread(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mount.json"
    assert mount.main(["--dir", str(tmp_path / "work"), "--big", "1", "--small", "3", "--procs", "1",
                       "--repeat", "1", "--pace", "0", "--no-drop", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "min of" not in text, text
    assert re.search(rf"^ 64KiB warm, one process, median \[min-max\] of 7: {SPREAD} us/file direct, "
                     rf"{SPREAD} us/file through the mount \(\d+\.\d\dx\)$", text, re.M), text
    [row] = [r for r in json.loads(out.read_text())["results"]
             if r["size"] == "64KiB" and "us_per_file_mount" in r]
    for side in ("direct", "mount"):
        low, high = row[f"us_per_file_{side}_range"]
        assert low <= row[f"us_per_file_{side}"] <= high
    assert row["passes"] == 7


@needs_fuse
@pytest.mark.parametrize(("flag", "kept"), [("--big", "64KiB"), ("--small", "4MiB")])
def test_mount_skips_a_size_given_0(tmp_path: Path, flag: str, kept: str) -> None:
    out = tmp_path / "mount.json"
    sizes = {"--big": "1", "--small": "2", flag: "0"}
    assert mount.main(["--dir", str(tmp_path / "work"), *[x for kv in sizes.items() for x in kv],
                       "--procs", "1", "--repeat", "1", "--pace", "0", "--no-drop", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert {r["size"] for r in doc["results"]} == {kept}
    assert list(doc["calls"]) == [kept]


def test_mount_refuses_a_negative_size(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        mount.main(["--big", "-1", "--no-drop"])
    assert stopped.value.code == 2
    assert "--big and --small must be 0 (skip) or more" in capsys.readouterr().err
