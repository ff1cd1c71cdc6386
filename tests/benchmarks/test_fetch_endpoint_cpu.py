"""``epochfs bench fetch --endpoint URL``: the server is not the benchmark's, so its CPU is not
measured, and the report says so with "-" (it printed ``moto CPU nan%``), in each run's line and
in the table. A real moto server stands in for the endpoint; toy sizes, no timed assertion."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from epochfs.benchmarks import fetch, harness


def test_an_endpoint_not_ours_shows_no_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with harness.moto_server(tmp_path / "moto.log") as moto:
        rc = fetch.main(["--endpoint", moto.endpoint, "--large", "2", "--large-size", "4096", "--small", "0",
                         "--repeat", "1", "--tools", "epochfs", "--checksums", "md5", "--dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "nan" not in out, out
    assert re.search(r"^  large +md5 +epochfs +run 0: .* moto CPU +- of a core", out, re.M), out
    assert re.search(r"^large +epochfs .* +- +\d+\.\d\d +md5", out, re.M), out
