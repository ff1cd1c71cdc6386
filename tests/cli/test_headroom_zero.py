"""``--headroom 0`` in snapshot mode is refused at the start (exit 2, one line naming the flag).

Snapshot mode cuts the newest samples within ``capacity x (1 - headroom)``: with no headroom a full
cache's epochs pin all of it, the sampler can fetch nothing, and every later epoch equals the last
(the reviewer's run: 15 epochs of one content, 16 of 40 objects fetched, backpressure for ever).
Schedule mode's windows come from the schedule, not from the headroom, so 0 stays accepted there.
Run as a user would: the real console script, in a process group of its own."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
PROMPT = 60.0
"""Seconds within which a refused value ends the command (about 1 s measured)."""


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``epochfs ARGS`` with no ``EPOCHFS_*`` of the caller's; its group killed on timeout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    proc = subprocess.Popen([EPOCHFS, *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=PROMPT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"epochfs {args[0]} did not end within {PROMPT:.0f}s: {err[-2000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("value", ["0", "0.0"])
def test_sample_refuses_no_headroom_in_snapshot_mode(tmp_path: Path, value: str) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.bin").write_bytes(b"x" * 100)
    r = _run(["sample", "--cache", str(tmp_path / "cache"), "--remote", f"file://{tmp_path / 'data'}",
              "--headroom", value], cwd=tmp_path)
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    lines = r.stderr.strip().splitlines()
    assert lines[-1].startswith("epochfs sample: --headroom: "), r.stderr[-3000:]
    assert not (tmp_path / "cache").exists()  # refused before the cache was made


def test_no_headroom_stays_accepted_in_schedule_mode(tmp_path: Path) -> None:
    from epochfs.sidecar.config import SamplerSettings, from_args

    flags = {"cache": str(tmp_path / "cache"), "remote": f"file://{tmp_path}", "headroom": "0",
             "schedule": "initial=8,growth=1.5"}
    ns = argparse.Namespace(**{f.name: flags.get(f.name) for f in fields(SamplerSettings)})
    settings = from_args(SamplerSettings, ns, environ={})
    assert settings.headroom == 0.0 and settings.schedule is not None
