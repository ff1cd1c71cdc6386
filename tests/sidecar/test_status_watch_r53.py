"""``epochfs status --watch`` of a --mount that does not exist (a typo) exits 2, as the one-shot
does, instead of a line every interval for ever (a script piping ``--watch --json`` hung with
nothing on stdout; a folder that is there but not mounted yet is still watched); and an index
deleted under a --cache watch (the next sampler start rebuilds it, a second) is a line read again
at the next interval that says the index is missing, not "not an epochfs cache" and an exit
(review R53a)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from store_helpers import put

from epochfs.sidecar.status import read_stats, retried
from epochfs.sidecar.store import INDEX_NAME, Policy, Store

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))


@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_a_watch_of_a_folder_that_is_no_mount_exits_2(tmp_path: Path, extra: list[str]) -> None:
    proc = subprocess.run([EPOCHFS, "status", "--mount", str(tmp_path / "nowhere"), "--watch",
                           "--interval", "1", *extra], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "does not exist" in proc.stderr, proc.stderr
    assert proc.stdout == ""


def test_an_index_deleted_under_a_cache_watch_is_said_missing_and_read_again(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with Store(cache, create=True) as store:
        store.configure(Policy(capacity=10_000, min_samples=1))
        for i in range(3):
            put(store, f"train/{i}.bin")
    assert retried(lambda: read_stats(cache=cache, mount=None))[0] is not None
    (cache / INDEX_NAME).unlink()
    doc, line = retried(lambda: read_stats(cache=cache, mount=None))
    assert doc is None
    assert "the index is missing" in line and "read again at the next interval" in line, line
    assert not (cache / INDEX_NAME).exists()  # a reader never makes it
