"""``epochfs status --mount`` answers when the mount does not. A stopped FUSE server left it blocked
for ever (no output; a standalone ``epochfs mount`` has no supervisor to notice), a fifo named
status.json blocked its open, and a link to ``/dev/zero`` grew it to 7 GB in 20 s. Now: a mount
that does not answer within ``--answer-timeout`` is said so, exit 2; a status.json that is no
regular file, or past the size cap, is refused in one line, exit 2. A real FUSE mount of a real
store (its server SIGSTOPped), the real console script."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from epochfs.sidecar.statusread import MAX_STATUS_BYTES
from tests.fuse_helpers import cut_epochs, freeze, mounted, open_store

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))


def _status(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    return subprocess.run([EPOCHFS, "status", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_a_stopped_fuse_server_is_said_not_to_answer(tmp_path: Path) -> None:
    cache, mount = tmp_path / "cache", tmp_path / "mnt"
    with open_store(cache) as store:
        cut_epochs(store, 1)
    with mounted(cache, mount) as m:
        assert _status("--mount", str(mount)).returncode == 0  # answered while the server runs
        freeze(m.proc)
        try:
            started = time.monotonic()
            proc = _status("--mount", str(mount), "--answer-timeout", "1")
            took = time.monotonic() - started
        finally:
            m.proc.send_signal(signal.SIGCONT)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    said = f"--mount: {mount} did not answer within 1 s: a FUSE server that is stopped or hung?"
    assert said in proc.stderr, proc.stderr
    assert "epochfs unmount --mount" in proc.stderr, proc.stderr
    assert took < 30, took  # not the subprocess timeout: the command ended by itself


def _folder_with_status(tmp_path: Path) -> tuple[Path, Path]:
    folder = tmp_path / "view"
    (folder / ".epochfs").mkdir(parents=True)
    return folder, folder / ".epochfs" / "status.json"


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_status_json_that_is_no_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    folder, status = _folder_with_status(tmp_path)
    if kind == "fifo":
        os.mkfifo(status)  # an open for reading blocks until a writer comes
    else:
        status.symlink_to("/dev/zero")  # a read never ends
    proc = _status("--mount", str(folder), timeout=30)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"--mount: cannot read {status}: not a regular file (no status document)" in proc.stderr


def test_a_status_json_past_the_cap_is_refused(tmp_path: Path) -> None:
    folder, status = _folder_with_status(tmp_path)
    with open(status, "wb") as f:
        f.truncate(MAX_STATUS_BYTES + 1)  # sparse: no disk used
    proc = _status("--mount", str(folder), timeout=30)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"--mount: cannot read {status}: more than 64 MiB (no status document)" in proc.stderr
