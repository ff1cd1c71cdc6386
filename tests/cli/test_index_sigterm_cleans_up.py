"""SIGTERM to ``epochfs index`` (a Job's end, ``kubectl delete``) stops it as Ctrl-C does: the
temporary folder of listed parts is removed (gigabytes for a large bucket) and it exits 143;
before, the default action killed it and left the folder behind.

The store is a real TCP listener that accepts and never answers, so the listing is certainly
under way (its temporary folder made, its discovery page waiting) when the signal comes."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

from common import wait_until

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))


def test_sigterm_removes_the_temporary_folder_and_exits_143(tmp_path: Path) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    accepted = threading.Event()

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)
            accepted.set()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EPOCHFS_", "AWS_"))}
    env.update(TMPDIR=str(temp), AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
               AWS_DEFAULT_REGION="us-east-1")
    proc = subprocess.Popen(
        [EPOCHFS, "index", "s3://bkt/ds", "--out", str(tmp_path / "idx.jsonl.gz"),
         "--endpoint-url", f"http://127.0.0.1:{server.getsockname()[1]}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: accepted.is_set() or proc.poll() is not None, timeout=60,
                   what="epochfs index asking the store")
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        wait_until(lambda: any(temp.glob("epochfs-index-*")), timeout=60, what="its temporary folder")
        proc.terminate()
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err[-3000:]
        assert "Traceback" not in err, err[-3000:]
        assert list(temp.iterdir()) == [], "the temporary folder of listed parts was left behind"
        assert not (tmp_path / "idx.jsonl.gz").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        with contextlib.suppress(OSError):
            server.shutdown(socket.SHUT_RDWR)
        server.close()
        for conn in held:
            conn.close()
        thread.join(timeout=10)
