"""Progress of long CLI work: a bar redrawn in place on a terminal, plain lines every few seconds
elsewhere (issue 21, "progress bars on a terminal for verify, index"). The unit tests drive a
fake clock; the last one runs ``epochfs verify`` on a real pseudo-terminal."""

from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

from common import wait_until
from integrity_helpers import objects_of, sampling

from epochfs.sidecar.progressbar import Progress
from epochfs.sidecar.remote.testing import MemoryRemote


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_terminal_gets_a_bar_with_an_estimate_redrawn_in_place() -> None:
    out, clock = io.StringIO(), Clock()
    bar = Progress("verify:", out=out, unit="objects", tty=True, clock=clock)
    clock.now = 10.0
    bar.update(250, 1000, "2.0 MiB/s")
    bar.update(260, 1000)  # within REDRAW of the last frame: not drawn
    clock.now = 20.0
    bar.update(500, 1000, "2.0 MiB/s")
    bar.close(1000, 1000)
    frames = out.getvalue().split("\r\x1b[2K")[1:]
    assert frames[0] == "verify: [#######.......................]  25% 250/1,000 objects ~30s left, 2.0 MiB/s"
    assert frames[1].startswith("verify: [###############...............]  50% 500/1,000 objects ~20s left")
    assert frames[2] == "verify: [##############################] 100% 1,000/1,000 objects\n"
    assert len(frames) == 3


def test_elsewhere_a_line_every_few_seconds_and_no_bar() -> None:
    out, clock = io.StringIO(), Clock()
    bar = Progress("index:", out=out, unit="spans", every=5.0, tty=False, clock=clock)
    for t, done in ((1.0, 1), (5.0, 2), (6.0, 3), (10.5, 4)):
        clock.now = t
        bar.update(done, None, f"{done * 1000:,} keys")
    bar.close()
    assert out.getvalue() == "index: 2 spans, 2,000 keys\nindex: 4 spans, 4,000 keys\n"


def test_epochfs_verify_on_a_terminal_draws_a_bar(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with sampling(cache, MemoryRemote(objects_of(30)), "--scrub-rate", "0") as (store, _):
        wait_until(lambda: store.stats().samples == 30, what="30 objects admitted")
    primary, secondary = pty.openpty()
    try:
        epochfs = str(Path(sys.executable).with_name("epochfs"))
        proc = subprocess.run([epochfs, "verify", "--cache", str(cache)], stdout=subprocess.PIPE,
                              stderr=secondary, text=True, timeout=120)
        os.close(secondary)
        secondary = -1
        shown = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the terminal's other side is closed and drained
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(primary)
        if secondary >= 0:
            os.close(secondary)
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == "0 damaged, 30 ok", proc.stdout
    text = shown.decode()
    assert "\r\x1b[2Kverify: [" in text and "100% 30/30 objects" in text, text
