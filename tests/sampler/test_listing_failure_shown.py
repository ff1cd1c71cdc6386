"""A listing that keeps failing says why in `epochfs status` and status.json, and stops saying it
once a run goes through. Before: the cause was only in the sampler's log; status read `listing: 0 of
about 0 keys seen (0.0%) … epochs cut now sample what is listed so far`, and a schedule-mode start
waited for a complete listing in silence. The real `epochfs sample` with a truncated `--index`."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from common import wait_until

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
ENV = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}


def _status(cache: Path) -> dict[str, Any]:
    r = subprocess.run([EPOCHFS, "status", "--cache", str(cache), "--json"], env=ENV,
                       capture_output=True, text=True, timeout=30)
    return json.loads(r.stdout) if r.returncode == 0 else {}


def _indexed(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """Three files and the real `epochfs index` of them: (the folder, the index)."""
    data = tmp_path / "data"
    data.mkdir()
    for i in range(3):
        (data / f"{i}.bin").write_bytes(os.urandom(100))
    index = tmp_path / name
    subprocess.run([EPOCHFS, "index", data.as_uri(), "--out", str(index)], env=ENV, check=True,
                   capture_output=True, timeout=60)
    return data, index


@pytest.mark.long
def test_a_failing_listing_says_why_until_it_goes_through(tmp_path: Path) -> None:
    data, whole = _indexed(tmp_path, "whole.jsonl")
    index = tmp_path / "index.jsonl"
    index.write_bytes(whole.read_bytes().rsplit(b"\n", 2)[0] + b"\n")  # the trailer lost
    cache = tmp_path / "cache"
    proc = subprocess.Popen([EPOCHFS, "sample", "--cache", str(cache), "--remote", data.as_uri(),
                             "--index", str(index)],
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: "failing" in _status(cache).get("listing", {}) or proc.poll() is not None,
                   timeout=60, what="the listing's failure in status.json")
        assert proc.poll() is None
        assert "ends without its trailer" in _status(cache)["listing"]["failing"]
        text = subprocess.run([EPOCHFS, "status", "--cache", str(cache)], env=ENV, capture_output=True,
                              text=True, timeout=30).stdout
        assert "listing: failing, tried again" in text and "ends without its trailer" in text, text
        shutil.copyfile(whole, index)  # mended: the next try goes through
        wait_until(lambda: _status(cache).get("samples") == 3 or proc.poll() is not None, timeout=60,
                   what="the samples once the index is whole")
        assert proc.poll() is None
        assert "failing" not in _status(cache)["listing"]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]


def _wait_whole(cache: Path, proc: subprocess.Popen[str]) -> None:
    wait_until(lambda: (_status(cache).get("listing", {}).get("complete") is True
                        and _status(cache).get("samples") == 3) or proc.poll() is not None,
               timeout=60, what="the complete catalog, every sample")


def _wait_said(log: Path, proc: subprocess.Popen[str], words: str) -> None:
    wait_until(lambda: words in log.read_text() or proc.poll() is not None, timeout=60,
               what=f"the log's {words!r}")


def test_an_index_gone_after_a_complete_listing_does_not_stop_the_start(tmp_path: Path) -> None:
    """Before: the index's header was read at every start, so a deleted or rotated index object
    ended the next start with exit 2 (`--index: cannot read the index …`) though the catalog it had
    listed was complete: one lost file stopped a fleet at its restarts."""
    data, index = _indexed(tmp_path, "index.jsonl")
    cache = tmp_path / "cache"
    for run in range(2):
        log = tmp_path / f"run{run}.log"
        with open(log, "w") as out:
            proc = subprocess.Popen([EPOCHFS, "sample", "--cache", str(cache), "--remote", data.as_uri(),
                                     "--index", str(index)],
                                    env=ENV, stdout=subprocess.DEVNULL, stderr=out, text=True)
        try:
            if run == 0:
                _wait_whole(cache, proc)
            else:  # the cache is whole already: wait for this start's own word on the index
                _wait_said(log, proc, "sampling from the complete catalog")
            assert proc.poll() is None, log.read_text()[-2000:]
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        assert proc.returncode == 0, log.read_text()[-2000:]
        if run == 0:
            index.unlink()
    err = log.read_text()
    assert "cannot be read now" in err and _status(cache)["samples"] == 3, err[-2000:]
