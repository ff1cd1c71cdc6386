"""``python -m epochfs.benchmarks.fairness_floor``: how often uniform random samples miss the
fairness aims by themselves, per key space shape and sample size, as a table and JSON rows; bad
flags refused with a message."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from epochfs.benchmarks.fairness_floor import COLUMNS, main


def test_the_floor_has_a_row_per_shape_and_size(tmp_path: Path) -> None:
    out, table = tmp_path / "floor.json", tmp_path / "floor.md"
    args = ["--shapes", "equal,skewed", "--keys", "10k", "--sizes", "2,34,20k", "--trials", "100",
            "--json", str(out), "--markdown", str(table)]
    done = subprocess.run([sys.executable, "-P", "-m", "epochfs.benchmarks.fairness_floor", *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "skipped 1 sample sizes above the 10000 keys" in done.stderr
    rows = json.loads(out.read_text())
    assert [(r["shape"], r["samples"]) for r in rows] == [("equal", 2), ("equal", 34), ("skewed", 2),
                                                          ("skewed", 34)]
    for r in rows:
        assert r["trials"] == 100 and r["keys"] == 10_000 and r["strata"] == 100
        assert all(0.0 <= r[k] <= 1.0 for k in ("miss_tv", "miss_folders", "miss_ks")), r
    equal2 = rows[0]  # two keys of 100 equal folders: nearly always two folders, TV 0.98
    assert equal2["covered_median"] == 2 and equal2["tv_median"] == pytest.approx(0.98)
    assert equal2["miss_tv"] == 0.0 and equal2["miss_folders"] < 0.1
    assert rows[3]["miss_folders"] > 0.05  # 34 keys over skewed folders: chance misses often
    lines = table.read_text().splitlines()
    assert lines[0].startswith("commit ")
    assert lines[1] == "command: python -m epochfs.benchmarks.fairness_floor " + " ".join(args)
    header = lines.index("| " + " | ".join(COLUMNS) + " |")
    assert lines[header + 2].startswith("| equal | 100 | 2 | 2 | 0.980 |")
    assert len(lines[header + 2:header + 2 + len(rows)]) == 4 and lines[header + 2 + len(rows)] == ""
    assert done.stdout.startswith(lines[0])


def test_no_ks_leaves_the_ks_out(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--shapes", "flat", "--keys", "1000", "--sizes", "10", "--trials", "20", "--no-ks"]) == 0
    assert "| flat | 10 | 10 |" in capsys.readouterr().out
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(("args", "message"), [
    (["--sizes", "0"], "sample sizes must be at least 1"),
    (["--sizes", "2,ten"], "sample sizes are counts separated by commas"),
    (["--trials", "0"], "--trials must be at least 1"),
    (["--shapes", "nosuch"], "unknown key space shape 'nosuch'"),
    (["--shapes", ","], "--shapes names no key space"),
    (["--keys", "10", "--sizes", "50"], "no sample size is at most --keys (10)"),
    (["--seed", "x"], "invalid int value"),
])
def test_bad_flags_are_refused_with_a_message(args: list[str], message: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(args)
    assert stop.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and message in captured.err
