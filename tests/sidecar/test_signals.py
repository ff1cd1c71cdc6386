"""A stop signal that lands while the main thread holds the stop event's lock (inside Event.wait or
a first Event.set) must still stop the process: a sampler that got SIGTERM twice (its supervisor's,
then PR_SET_PDEATHSIG's) once waited forever on that lock in its own handler."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""\
    import logging, os, signal, sys, threading
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    from epochfs.sidecar.sampler.command import _install_signals
    stop = threading.Event()
    _install_signals(stop)
    with stop._cond:  # the main thread holds the event's lock, as inside Event.wait or Event.set
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        n = sum(range(1000))  # bytecodes: the handlers run here, with the lock held
    print("stopped" if stop.wait(10) else "not stopped", flush=True)
""")


@pytest.mark.parametrize("round_", range(3))
def test_two_signals_while_the_stop_lock_is_held_still_stop(round_: int) -> None:
    proc = subprocess.run([sys.executable, "-P", "-c", SCRIPT], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and proc.stdout.strip() == "stopped", (proc.stdout, proc.stderr[-2000:])
    assert proc.stderr.count("stopping") == 1, proc.stderr
