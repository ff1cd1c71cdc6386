"""An ``--index`` written from another remote than ``--remote`` is said so in the sampler's log.

Its keys are fetched from ``--remote`` (a mirror's index is a legitimate use); before, nothing said
the two differed, and an index of an unrelated dataset had every key skipped as missing, silently.
The real ``epochfs index`` and ``epochfs sample`` over ``file://`` folders."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from common import wait_until

from epochfs.sidecar.store import INDEX_NAME, Store

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
ENV = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
SAID = "was written from"


def _samples(cache: Path) -> int:
    if not (cache / INDEX_NAME).exists():
        return 0
    with Store(cache) as store:
        return store.stats().samples


def _sample_log(cache: Path, remote: str, index: Path, log: Path) -> str:
    """``epochfs sample`` until it has fetched the 3 samples; its log."""
    with open(log, "w") as out:
        proc = subprocess.Popen([EPOCHFS, "sample", "--cache", str(cache), "--remote", remote,
                                 "--index", str(index)], env=ENV, stdout=subprocess.DEVNULL, stderr=out)
    try:
        wait_until(lambda: _samples(cache) == 3 or proc.poll() is not None, timeout=60,
                   what="the sampler's 3 samples")
        assert proc.poll() is None, log.read_text()[-2000:]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert proc.returncode == 0, log.read_text()[-2000:]
    return log.read_text()


def test_an_index_of_another_remote_is_said_and_its_own_is_not(tmp_path: Path) -> None:
    for name in ("ds", "mirror"):
        (tmp_path / name).mkdir()
        for i in range(3):
            (tmp_path / name / f"{i}.bin").write_bytes(b"x" * 10)
    index = tmp_path / "index.jsonl"
    made = subprocess.run([EPOCHFS, "index", (tmp_path / "ds").as_uri(), "--out", str(index)],
                          env=ENV, capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    own = _sample_log(tmp_path / "c1", (tmp_path / "ds").as_uri() + "/", index, tmp_path / "own.log")
    assert SAID not in own, own
    mirror = _sample_log(tmp_path / "c2", (tmp_path / "mirror").as_uri(), index, tmp_path / "mirror.log")
    said = [line for line in mirror.splitlines() if SAID in line]
    written = f"was written from {(tmp_path / 'ds').as_uri()}, not --remote"
    assert len(said) == 1 and written in said[0], mirror
