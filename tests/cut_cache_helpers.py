"""A stopped cache with every sample of a small ``file://`` remote cached and epoch 0 cut, made by
the real sampler and ``epochfs cut``, and what the tests of a damaged or missing index read of it
(tests/store/test_empty_index_r53.py, tests/store/test_missing_index_r53.py)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

from common import wait_until
from sampler_helpers import EPOCHFS, running_sampler

from epochfs.sidecar.store import INDEX_NAME, Store
from epochfs.sidecar.store.objects import OBJECTS_DIR

ENV = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
FILES = 200

CutCache = tuple[Path, Path, set[str]]
"""(the cache, the remote's folder, the object files of epoch 0)."""


def epochfs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EPOCHFS, *args], capture_output=True, text=True, timeout=120, env=ENV)


def samples(cache: Path) -> int:
    with Store(cache) as store:
        return store.stats().samples


def objects(cache: Path) -> set[str]:
    root = cache / OBJECTS_DIR
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def epochs(cache: Path) -> list[int]:
    db = sqlite3.connect(f"file:{cache / INDEX_NAME}?mode=ro", uri=True)
    try:
        return [int(r[0]) for r in db.execute("SELECT n FROM epochs ORDER BY n")]
    finally:
        db.close()


def make_cut_cache(base: Path) -> CutCache:
    """The cut cache, made under ``base`` (a module fixture's folder: made once)."""
    data = base / "data"
    data.mkdir()
    for i in range(FILES):
        (data / f"f{i:03d}.bin").write_bytes(os.urandom(100 + i))
    cache = base / "cache"
    with running_sampler(cache, data.as_uri(), "--capacity", "64Mi"):
        wait_until(lambda: samples(cache) == FILES, timeout=120, what="every sample cached")
        cut = epochfs("cut", "--cache", str(cache), "--force")
        assert (cut.returncode, cut.stdout.strip()) == (0, "0"), cut.stderr
    assert epochs(cache) == [0]
    found = objects(cache)
    assert len(found) == FILES
    return cache, data, found


def copy_cache(cut: CutCache, tmp_path: Path) -> CutCache:
    """A copy of the cut cache (the same remote: the index records which one filled it)."""
    cache, data, found = cut
    shutil.copytree(cache, tmp_path / "cache", symlinks=True)
    return tmp_path / "cache", data, found
