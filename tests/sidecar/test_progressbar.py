"""Progress of long CLI work: a bar redrawn in place on a terminal, plain lines every few seconds
elsewhere (issue 21, "progress bars on a terminal for verify, index"). The unit tests drive a
fake clock; the last one runs ``epochfs verify`` on a real pseudo-terminal."""

from __future__ import annotations

import io
import logging
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from common import wait_until
from integrity_helpers import objects_of, sampling

from epochfs.sidecar.listing.indexfile import write_index
from epochfs.sidecar.progressbar import Progress
from epochfs.sidecar.remote import open_remote
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


def on_a_terminal(args: list[str]) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run ``epochfs ARGS`` with its stderr on a pseudo-terminal (stdout a pipe); what the
    terminal showed, read to its end."""
    primary, secondary = pty.openpty()
    try:
        epochfs = str(Path(sys.executable).with_name("epochfs"))
        proc = subprocess.run([epochfs, *args], stdout=subprocess.PIPE, stderr=secondary, text=True,
                              timeout=120)
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
    return proc, shown.decode()


def test_epochfs_verify_on_a_terminal_draws_a_bar(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with sampling(cache, MemoryRemote(objects_of(30)), "--scrub-rate", "0") as (store, _):
        wait_until(lambda: store.stats().samples == 30, what="30 objects admitted")
    proc, text = on_a_terminal(["verify", "--cache", str(cache)])
    assert proc.returncode == 0 and proc.stdout.splitlines()[-1] == "0 damaged, 30 ok", proc.stdout
    assert "\r\x1b[2Kverify: [" in text and "100% 30/30 objects" in text, text


def a_dataset(root: Path, folders: int = 4, files: int = 75) -> Path:
    """``folders`` x ``files`` small files: several spans for the listers, each many keys."""
    for f in range(folders):
        (root / f"class{f}").mkdir(parents=True)
        for i in range(files):
            (root / f"class{f}" / f"{i:04d}.bin").write_bytes(b"x" * 16)
    return root


def test_epochfs_index_on_a_terminal_draws_a_bar_and_elsewhere_none(tmp_path: Path) -> None:
    """The bar of the spans listed, the keys in its detail; off a terminal (a pipe, a pod's log)
    no control sequences at all."""
    dataset = a_dataset(tmp_path / "data")
    out = tmp_path / "i.jsonl.gz"
    proc, text = on_a_terminal(["index", dataset.as_uri(), "--out", str(out)])
    assert proc.returncode == 0 and proc.stdout.strip() == "300", (proc.stdout, text)
    frames = text.split("\r\x1b[2K")[1:]
    assert frames and all(f.startswith("index: [") for f in frames), text
    # A frame: the bar, the spans done, the keys so far; the last one's line ended (the terminal
    # shows "\n" as "\r\n") before the log's next line.
    assert re.search(r"index: \[[#.]{30}\] +\d+% \d+/\d+ spans, [\d,]+ keys \([\d,]+/s\)", text), text
    assert re.match(r"[^\n]* keys \([\d,]+/s\)\r?\n", frames[-1]), text

    piped = subprocess.run([str(Path(sys.executable).with_name("epochfs")), "index", dataset.as_uri(),
                            "--out", str(tmp_path / "j.jsonl.gz")], capture_output=True, text=True,
                           timeout=120)
    assert piped.returncode == 0 and piped.stdout.strip() == "300", piped.stderr
    assert "\x1b" not in piped.stderr and "\r" not in piped.stderr and "[#" not in piped.stderr, piped.stderr


def test_write_index_off_a_terminal_logs_a_line_of_progress(tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    """Off a terminal ``epochfs index`` logs "indexing: N key(s) so far" lines (every
    ``progress_seconds``; here every page) and its Progress writes nothing."""
    dataset = a_dataset(tmp_path / "data")
    out = io.StringIO()
    bar = Progress("index:", out=out, unit="spans", tty=False)
    remote = open_remote(dataset.as_uri())
    try:
        with caplog.at_level(logging.INFO, logger="epochfs.catalog"):
            count = write_index(remote, str(tmp_path / "i.jsonl.gz"), progress=bar, progress_seconds=0.0)
    finally:
        remote.close()
    assert count == 300
    lines = [r.getMessage() for r in caplog.records if "so far" in r.getMessage()]
    assert lines and re.fullmatch(r"indexing: \d+ key\(s\) so far \(\d+/s\), \d+ of \d+ span\(s\) done",
                                  lines[-1]), lines
    assert lines[-1].startswith("indexing: 300 key(s)"), lines
    assert out.getvalue() == ""
