"""The loader benchmark runs end to end on a generated plain folder and both sides read the same bytes."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "loader.py"


def test_loader_benchmark_on_a_plain_folder(tmp_path: Path, capsys, monkeypatch) -> None:
    spec = importlib.util.spec_from_file_location("bench_loader", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_loader", bench)  # dataclasses look their module up there
    spec.loader.exec_module(bench)
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
