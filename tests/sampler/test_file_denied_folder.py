"""A ``file://`` folder the sampler may not read is passed over in the cache's first listing.

A volume's root holds ``lost+found`` (0700, root's) on ext4, and the chart runs the sidecar as a
user that is not root: the walk met it, failed the listing with EACCES, and the listing was tried
again for ever, always failing at the same folder before its first page was full, so nothing at
all was cataloged or fetched ("0 sample(s) fetched" for as long as it ran). It is now passed over
as an S3 prefix the bucket policy denies is (sidecar/listing/refused.py): one WARNING names it,
the other folders are sampled. A relist still fails on it, so the catalog never loses a folder
whose permissions changed for a moment (tests/remote/test_file_walk_unreadable.py).

Real parts: ``epochfs sample`` started without root's permission checks (``setpriv``, every
capability dropped: :func:`folderview_helpers.unprivileged`), a folder of another user.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest
from common import wait_until
from folderview_helpers import unprivileged
from sampler_helpers import EPOCHFS, index_rows

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="makes a folder of another user")

FOLDERS = ("a", "b", "c")
FILES = 4
STRANGER = 12345


def _samples(cache: Path) -> int:
    try:
        return int(index_rows(cache, "SELECT count(*) FROM samples")[0][0])
    except sqlite3.OperationalError:  # no index yet, or its schema not committed yet
        return 0


def test_a_folder_the_sampler_may_not_read_is_passed_over(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    for folder in FOLDERS:
        (root / folder).mkdir(parents=True)
        for i in range(FILES):
            (root / folder / f"{i}.bin").write_bytes(bytes([i]) * 100)
    hidden = root / "lost+found"
    hidden.mkdir()
    (hidden / "#1234").write_bytes(b"x")
    os.chown(hidden, STRANGER, STRANGER)
    hidden.chmod(0o700)
    cache = tmp_path / "cache"
    log = tmp_path / "sampler.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    with open(log, "wb") as out:
        proc = subprocess.Popen(unprivileged([EPOCHFS, "sample", "--remote", root.as_uri(), "--cache",
                                              str(cache), "--capacity", "1Mi"]),
                                stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        wait_until(lambda: _samples(cache) == len(FOLDERS) * FILES or proc.poll() is not None,
                   timeout=60, what="every readable file sampled")
        text = log.read_text(errors="replace")
        assert proc.poll() is None, text[-3000:]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    text = log.read_text(errors="replace")
    refused = [line for line in text.splitlines() if "listing of 'lost+found/' refused" in line]
    assert len(refused) == 1 and "WARNING" in refused[0] and "Denied" in refused[0], text[-3000:]
    assert "listing failed" not in text, text[-3000:]
    keys = {str(k) for (k,) in index_rows(cache, "SELECT key FROM catalog")}
    assert keys == {f"{f}/{i}.bin" for f in FOLDERS for i in range(FILES)}
