"""Running ``epochfs bench`` as a user would: the console script, from a folder outside the checkout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


EPOCHFS = Path(sys.executable).with_name("epochfs")


def bench(*args: str, cwd: Path, env: dict[str, str] | None = None,
          timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(EPOCHFS), "bench", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def decoy(folder: Path) -> Path:
    """A folder outside the checkout with an ``epochfs`` package in it that must never be imported."""
    (folder / "epochfs").mkdir(parents=True)
    (folder / "epochfs" / "__init__.py").write_text("raise SystemExit('the decoy epochfs was imported')\n")
    return folder


def run_benchmark(cmd: list[str], *, timeout: float) -> subprocess.CompletedProcess[str]:
    """A benchmark that starts sidecars, endpoints and mounts, in a session of its own: past
    ``timeout`` the whole session gets SIGTERM (the sidecar's supervisor unmounts what it mounted;
    ``subprocess.run``'s timeout killed only the benchmark and left its sidecar and mounts running),
    then SIGKILL, and the test fails with what the benchmark printed."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for sig, grace in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                out, err = proc.communicate(timeout=grace)
                break
            except subprocess.TimeoutExpired:
                continue
        raise AssertionError(f"{cmd[3:5]} ran past {timeout:.0f}s; stopped") from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)
