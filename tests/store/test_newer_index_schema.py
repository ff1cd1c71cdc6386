"""A cache whose index a newer epochfs wrote (a ``helm rollback`` onto a kept hostPath cache): every
command refuses it in one line, exit 2, saying that a newer epochfs wrote it and what to do (run
that version, or give another ``--cache``), and leaves the index as it was, so that the newer
version still finds its cache. The cache is a real one, filled by the sampler and ``epochfs cut``;
only its recorded schema version is raised past this version's.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from common import free_port
from cut_cache_helpers import ENV, CutCache, make_cut_cache

from epochfs.sidecar.store import INDEX_NAME, Meta
from epochfs.sidecar.store.schema import SCHEMA_VERSION

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
NEWER = SCHEMA_VERSION + 1


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> CutCache:
    return make_cut_cache(tmp_path_factory.mktemp("filled"))


def recorded_version(cache: Path) -> str:
    db = sqlite3.connect(f"file:{cache / INDEX_NAME}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT value FROM meta WHERE name=?", (Meta.SCHEMA_VERSION.value,)).fetchone()
    finally:
        db.close()
    return str(row[0])


@pytest.fixture
def newer(filled: CutCache, tmp_path: Path) -> Path:
    """A copy of the filled cache, its index marked as written by the next schema version."""
    cache = tmp_path / "cache"
    shutil.copytree(filled[0], cache, symlinks=True)
    db = sqlite3.connect(cache / INDEX_NAME)
    try:
        db.execute("UPDATE meta SET value=? WHERE name=?", (str(NEWER), Meta.SCHEMA_VERSION.value))
        db.commit()
    finally:
        db.close()
    return cache


@pytest.mark.parametrize("command", ["sample", "status", "cut", "sidecar"])
def test_an_index_of_a_newer_epochfs_is_refused_saying_what_to_do(
    command: str, newer: Path, filled: CutCache, tmp_path: Path
) -> None:
    view = tmp_path / "view"
    view.mkdir()  # made already: the sidecar's line is then its only one
    extra = {
        "sample": ["--remote", filled[1].as_uri(), "--capacity", "64Mi"],
        "sidecar": ["--remote", filled[1].as_uri(), "--capacity", "64Mi", "--mount", str(view),
                    "--health-port", str(free_port())],
    }.get(command, [])
    proc = subprocess.run([EPOCHFS, command, "--cache", str(newer), *extra], capture_output=True,
                          text=True, env=ENV, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2 and "Traceback" not in out, out
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out
    index = newer / INDEX_NAME
    assert lines[0] == (f"epochfs {command}: --cache: {index}: written by a newer epochfs (index "
                        f"schema {NEWER}; this version reads up to {SCHEMA_VERSION}): run the newer "
                        "version on it, or give this one another --cache (an empty folder: it starts cold)")
    assert recorded_version(newer) == str(NEWER)  # left for the newer version as it wrote it
    assert not os.path.ismount(view)
