"""``epochfs bench fetch --tools ...,download-path``: the download path alone in a fresh process
(:mod:`epochfs.benchmarks._fetch_alone`) runs in turn with the other tools against the same moto
server, fetches every object (the run checks the files' count and bytes), and the report sets the
sampler against it and it against the other tools, end to end. Toy sizes; no timed assertion."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from epochfs.benchmarks import fetch


def test_the_download_path_runs_as_a_tool_and_is_reported(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    rc = fetch.main(["--large", "3", "--large-size", "8192", "--small", "0", "--repeat", "2",
                     "--tools", "epochfs,s5cmd,download-path", "--checksums", "crc64nvme",
                     "--dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert re.search(r"^  large +crc64nvme +download-path +run 1: ", out, re.M), out
    assert re.search(r"^large \(bytes/s\): epochfs / download-path = ", out, re.M), out
    assert re.search(r"^large: download-path \(the download path alone in a fresh process\) / s5cmd = "
                     r"\d+\.\d\dx end to end \(per pair \d+\.\d\dx-\d+\.\d\dx\)", out, re.M), out
    assert "download-path / download-path" not in out, out
