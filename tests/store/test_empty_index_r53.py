"""An ``index.sqlite`` left without its schema (truncated to 0 bytes, or a database with no table)
beside a cache's epochs and objects is damage: the read-only commands report it and write
nothing, and the sampler's start rebuilds it from the epochs' members files.

Before (review r2, task A53a): ``epochfs status --cache`` printed a healthy empty cache (exit 0)
and wrote a fresh schema into the file, ``epochfs verify`` said "index: ok", and the next
sampler start removed epoch 0's members file ("never cut") and every object file as an orphan.
A new cache whose sampler was killed right after making its index (an empty file, nothing in
``objects/`` but the marker) is still a new cache, never reported as damage.

Real ``epochfs`` processes over a ``file://`` folder; real SQLite files.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import cut_cache_helpers as cc
import pytest
from common import wait_until
from sampler_helpers import running_sampler

from epochfs.sidecar.store import INDEX_NAME
from epochfs.sidecar.store.objects import MARKER_PREFIX, OBJECTS_DIR

ENV, FILES = cc.ENV, cc.FILES


@pytest.fixture(scope="module")
def cut_cache(tmp_path_factory: pytest.TempPathFactory) -> cc.CutCache:
    """(a stopped cache with every sample of the remote cached and epoch 0 cut, the remote's
    folder, the object files of epoch 0), made once by the real sampler and ``epochfs cut``."""
    return cc.make_cut_cache(tmp_path_factory.mktemp("r53"))


def _truncate(index: Path) -> None:
    index.write_bytes(b"")


def _no_tables(index: Path) -> None:
    index.unlink()
    db = sqlite3.connect(index)
    db.execute("PRAGMA user_version=3")  # a database file with a header and no table
    db.close()


def _blank(cache: Path, make: Callable[[Path], None]) -> None:
    for suffix in ("-wal", "-shm"):
        (cache / f"{INDEX_NAME}{suffix}").unlink(missing_ok=True)
    make(cache / INDEX_NAME)


def _folder(cache: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(cache.iterdir()) if p.is_file()}


@pytest.mark.parametrize(("make", "said"), [(_truncate, "an empty file"),
                                            (_no_tables, "an SQLite database with no tables")])
def test_read_commands_report_a_blank_index_as_damage_and_write_nothing(
        cut_cache: tuple[Path, Path, set[str]], tmp_path: Path, make: Callable[[Path], None],
        said: str) -> None:
    cache, _, _ = cc.copy_cache(cut_cache, tmp_path)
    _blank(cache, make)
    before = _folder(cache)
    for command in (["status"], ["verify", "--report-only"], ["cut"]):
        r = cc.epochfs(*command, "--cache", str(cache))
        assert r.returncode == 2, (command, r.stdout, r.stderr)
        [line] = r.stderr.strip().splitlines()
        # The family of every damaged index's refusal: "epochfs CMD: --cache: PATH: reason".
        assert line == (f"epochfs {command[0]}: --cache: {cache / INDEX_NAME}: damaged: the index is "
                        f"{said}, but the cache holds the members file(s) of epoch(s) 0 and object "
                        f"files in objects/; the sampler's next start rebuilds it from the epochs' "
                        f"members files"), line
        assert r.stdout == ""
        assert _folder(cache) == before, command  # no schema, no -wal, -shm or marker written


@pytest.mark.parametrize("status_first", [True, False])
def test_the_sampler_start_rebuilds_a_truncated_index_and_keeps_epoch_0(
        cut_cache: tuple[Path, Path, set[str]], tmp_path: Path, status_first: bool) -> None:
    cache, data, objects = cc.copy_cache(cut_cache, tmp_path)
    _blank(cache, _truncate)
    if status_first:
        assert cc.epochfs("status", "--cache", str(cache)).returncode == 2
    # The start returns once the sampler logged its recovery: the rebuild and the orphans' removal
    # are behind it.
    with running_sampler(cache, data.as_uri(), "--capacity", "64Mi") as sp:
        assert cc.samples(cache) == FILES
    log = sp.log_text()
    assert "is damaged (the index is an empty file, but the cache holds the members file(s) of " \
           "epoch(s) 0 and object files in objects/)" in log, log[-3000:]
    assert "epochs 0 restored from their members files" in log, log[-3000:]
    assert "never cut" not in log, log[-3000:]
    assert " 0 orphan object(s) removed" in log, log[-3000:]
    assert cc.epochs(cache) == [0]
    assert objects <= cc.objects(cache)  # every object file of epoch 0 is still there
    assert (cache / "epochs" / "epoch-0.members").is_file()
    assert [p.name for p in cache.glob(f"{INDEX_NAME}.corrupt-*")], "the damaged file kept aside"
    status = cc.epochfs("status", "--cache", str(cache), "--json")
    assert status.returncode == 0, status.stderr


def _new_cache(cache: Path, *, objects: bool) -> None:
    """The folder a new cache's sampler leaves when it is killed right after making its index:
    ``objects/`` (its marker only) and ``tmp/`` are made first, then the empty ``index.sqlite``."""
    cache.mkdir()
    if objects:
        (cache / OBJECTS_DIR).mkdir()
        (cache / OBJECTS_DIR / f"{MARKER_PREFIX}{os.urandom(16).hex()}").mkdir()
        (cache / "tmp").mkdir()
    (cache / INDEX_NAME).write_bytes(b"")


def test_an_empty_index_of_a_new_cache_is_a_new_cache(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(3):
        (data / f"f{i}.bin").write_bytes(os.urandom(64))
    cache = tmp_path / "cache"
    _new_cache(cache, objects=True)
    with running_sampler(cache, data.as_uri(), "--capacity", "1Mi") as sp:
        wait_until(lambda: cc.samples(cache) == 3, what="the new cache filled")
    assert "damaged" not in sp.log_text(), sp.log_text()[-3000:]
    assert not list(cache.glob(f"{INDEX_NAME}.corrupt-*"))


def test_an_empty_index_with_no_objects_folder_is_no_damage(tmp_path: Path) -> None:
    """Without ``objects/`` nothing says it is a cache: the foreign-file refusal, as before."""
    cache = tmp_path / "cache"
    _new_cache(cache, objects=False)
    r = cc.epochfs("status", "--cache", str(cache))
    assert r.returncode == 2
    assert "damaged" not in r.stderr and "(index.sqlite is an empty file)" in r.stderr, r.stderr
    assert (cache / INDEX_NAME).stat().st_size == 0
