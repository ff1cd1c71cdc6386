"""The loader benchmark runs end to end on a generated plain folder and both sides read the same bytes."""

from __future__ import annotations

import json
from pathlib import Path

from epochfs.benchmarks import loader as bench


def test_loader_benchmark_on_a_plain_folder(tmp_path: Path, capsys) -> None:
    out = tmp_path / "result.json"
    assert bench.main(["--samples", "24", "--sample-mib", "0.05", "--epochs", "0", "1", "--workers", "1",
                       "--batch-size", "4", "--repeat", "1", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    assert sorted((r["epoch"], r["side"]) for r in results) == [(0, "direct"), (0, "mount"), (1, "direct"),
                                                                (1, "mount")]
    for epoch, files in ((0, 12), (1, 24)):
        sides = [r for r in results if r["epoch"] == epoch]
        assert {r["samples"] for r in sides} == {files}
        assert len({r["bytes"] for r in sides}) == 1 and sides[0]["bytes"] > files * 50_000
    assert "from the second epoch on" in capsys.readouterr().out
