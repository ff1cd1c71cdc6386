"""Run a script as two real gloo ranks (torch.distributed on CPU, a file:// rendezvous) with a deadline.

Each rank is a process of its own with torchrun's variables (one rank per node: LOCAL_WORLD_SIZE=1),
so a collective that one rank never reaches is a real hang; the deadline turns it into a failure
(both processes are killed) instead of a blocked test run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_two_ranks(script: str | Path, args: list[str], timeout: float = 90.0) -> list[str]:
    """Start ``script rank *args`` for ranks 0 and 1; their combined outputs once both exited with 0.

    AssertionError with both outputs when one fails or the deadline passes (a hang)."""
    procs = []
    for rank in range(2):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
        procs.append(subprocess.Popen([sys.executable, str(script), str(rank), *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    outputs: list[str] = []
    hung = False
    try:
        for proc in procs:
            try:
                outputs.append(proc.communicate(timeout=timeout)[0].decode(errors="replace"))
            except subprocess.TimeoutExpired:
                hung = True
                outputs.append("(killed at the deadline)")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    codes = [proc.returncode for proc in procs]
    assert not hung and codes == [0, 0], f"ranks {codes} (hung: {hung}):\n" + "\n----\n".join(outputs)
    return outputs
