"""``make demo`` runs examples/demo.py: the whole mission end to end, also when interrupted."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from common import ROOT, wait_until

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]

EPOCH_LINE = re.compile(r"^epoch (\d+): +(\d+) samples \((\d+) new, (\d+) left out\)  cache .* loss \d\.\d+$",
                        re.MULTILINE)


def start_demo(workdir: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = workdir / "demo.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-u", str(ROOT / "examples" / "demo.py"), "--workdir", str(workdir), *args],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    return proc, log


def mounts_under(path: Path) -> list[str]:
    with open("/proc/self/mounts") as f:
        return [line for line in f if str(path) in line]


def test_demo_trains_over_growing_epochs_and_unmounts(tmp_path: Path) -> None:
    proc, log = start_demo(tmp_path, "--samples", "800", "--capacity", "2Mi", "--max-rate", "1Mi",
                           "--epochs", "4")
    assert proc.wait(timeout=240) == 0, log.read_text()[-3000:]
    text = log.read_text()
    epochs = [tuple(map(int, m)) for m in EPOCH_LINE.findall(text)]
    assert [e[0] for e in epochs] == [0, 1, 2, 3], text
    sizes = [e[1] for e in epochs]
    assert sizes[0] >= 64 and sizes == sorted(sizes) and sizes[-1] > sizes[0], text
    assert "sidecar exited with 0; mount gone" in text
    assert not mounts_under(tmp_path)


def test_ctrl_c_stops_the_sidecar_cleanly(tmp_path: Path) -> None:
    proc, log = start_demo(tmp_path, "--samples", "800", "--epochs", "1000")
    wait_until(lambda: "epoch 1:" in log.read_text() or proc.poll() is not None, timeout=120,
               what="the demo's second epoch")
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does: the whole foreground process group
    assert proc.wait(timeout=60) == 130, log.read_text()[-3000:]
    assert "demo: sidecar exited with 0; mount gone" in log.read_text()
    assert not mounts_under(tmp_path)
