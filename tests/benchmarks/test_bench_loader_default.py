"""What ``epochfs bench loader`` (and the default ``epochfs bench``'s loader step) runs is what its
help and docs/performance.md say: a generated plain folder read both ways (a check of the harness,
~1.0x), since ``epochfs bench`` passes no ``--sidecar``. The help of ``--sidecar`` called it "the
default of `epochfs bench loader`" and the docs table "EpochLoader through the mount".
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_sidecar_flag_says_what_runs_without_it(capsys: pytest.CaptureFixture[str]) -> None:
    loader = pytest.importorskip("epochfs.benchmarks.loader")
    with pytest.raises(SystemExit):
        loader.main(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    sidecar = shown[shown.index("--sidecar"):]
    assert "the default of `epochfs bench loader`" not in sidecar
    assert "Without it or --root, both sides read a generated plain folder" in sidecar
    assert "epochfs bench loader --args --sidecar" in sidecar


def test_the_docs_table_says_the_default_is_the_plain_folder() -> None:
    table = (ROOT / "docs" / "performance.md").read_text()
    [row] = re.findall(r"^\| `loader` \|.*$", table, re.M)
    assert "by default (also in `epochfs bench`'s default run) over a generated plain folder" in row
    assert "`epochfs bench loader --args --sidecar`" in row
