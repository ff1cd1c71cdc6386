"""A command started with its stop signals blocked still stops on them. A blocked signal stays
blocked through exec, so a parent's thread that blocked SIGTERM (a launcher, a test runner's
worker) left ``epochfs sample`` deaf to ``kill PID``: the signal pending, the sampler fetching on
until something killed it, with none of its clean stop. Each command unblocks them as it starts
(``cli._main``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from common import signal_state, wait_until

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))


def blocked(*signals: int) -> None:
    """In the child before exec: ``signals`` blocked, as the parent's thread had them."""
    signal.pthread_sigmask(signal.SIG_BLOCK, set(signals))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_sampler_started_with_its_stop_signal_blocked_stops_cleanly_on_it(tmp_path: Path, sig: int) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(3):
        (data / f"s{i}.bin").write_bytes(b"x" * 100)
    log = tmp_path / "sampler.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [EPOCHFS, "sample", "--remote", f"file://{data}", "--cache", str(tmp_path / "cache")],
            stdout=out, stderr=subprocess.STDOUT, env=env,
            preexec_fn=lambda: blocked(signal.SIGTERM, signal.SIGINT))
    try:
        wait_until(lambda: " recovery: " in log.read_text() or proc.poll() is not None, timeout=60,
                   what="the sampler's start (recovery logged, its handlers in place)")
        assert proc.poll() is None, log.read_text()[-3000:]
        proc.send_signal(sig)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            masks = signal_state(proc.pid)
            pytest.fail(f"the sampler still ran 30 s after {signal.Signals(sig).name} ({masks}):\n"
                        f"{log.read_text()[-3000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log.read_text()[-3000:]
