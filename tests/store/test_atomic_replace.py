"""The sidecar's one atomic writer (:func:`epochfs.sidecar.store.objects.replace_file` and
:func:`~epochfs.sidecar.store.objects.staged`): a failure midway leaves the old file whole and
no temp; a second writer of the same file while the first is midway writes into a temp of its
own, so each one's rename puts its own whole document in place; the temps a killed writer left
are told from a live writer's by the pid in their names."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from epochfs.sidecar.store import repairlog
from epochfs.sidecar.store.objects import clear_replace_temps, replace_file, staged, temp_beside


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_write_that_fails_midway_keeps_the_old_file_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_bytes(b"old\n")

    def pieces() -> Iterator[bytes]:
        yield b"half of the new "
        raise OSError(5, "the source failed")  # as a read of replace_local's source may

    with pytest.raises(OSError, match="the source failed"):
        replace_file(target, pieces())
    assert target.read_bytes() == b"old\n"
    assert _names(tmp_path) == ["state.json"]


def test_a_second_writer_while_the_first_is_midway_writes_its_own_temp(tmp_path: Path) -> None:
    """Two writers of one file at once (two threads; two supervisors on one cache): the second
    runs whole between two pieces of the first. A temp the two shared would be the second's when
    it is renamed (the first's rename then finds none); each has its own, and the last rename
    puts the first's whole document in place."""
    target = tmp_path / "state.json"
    target.write_bytes(b"old\n")

    def first() -> Iterator[bytes]:
        yield b"first, "
        replace_file(target, b"second\n")
        assert target.read_bytes() == b"second\n"
        yield b"whole\n"

    replace_file(target, first())
    assert target.read_bytes() == b"first, whole\n"
    assert _names(tmp_path) == ["state.json"]


def test_temps_are_hidden_beside_their_target_and_never_the_same(tmp_path: Path) -> None:
    target = tmp_path / "epochs.hwm"
    names = {temp_beside(target) for _ in range(100)}
    assert len(names) == 100
    assert all(p.parent == tmp_path and p.name.startswith(f".epochs.hwm.{os.getpid()}.") for p in names)


def test_a_staged_file_not_installed_is_removed_and_one_installed_is_in_place(tmp_path: Path) -> None:
    target = tmp_path / "epoch-3.members"
    with staged(target) as s:
        s.temp.write_bytes(b"not wanted after all\n")
    assert not target.exists() and _names(tmp_path) == []
    with pytest.raises(RuntimeError), staged(target) as s:
        s.temp.write_bytes(b"half")
        raise RuntimeError("the writer failed")
    assert _names(tmp_path) == []
    own = tmp_path / ".epoch-3.members.mine.tmp"
    with staged(target, own) as s:
        s.temp.write_bytes(b"members\n")
        s.install()
    assert target.read_bytes() == b"members\n" and _names(tmp_path) == ["epoch-3.members"]


def test_a_dead_writers_temps_go_and_a_live_ones_stay(tmp_path: Path) -> None:
    target = tmp_path / "repairs.log"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()  # a pid whose process has exited
    dead = tmp_path / f".repairs.log.{gone}.0a1b2c3d4e5f.tmp"
    mine = temp_beside(target)  # this process's: a killed predecessor's, as recovery sees it
    live = tmp_path / f".repairs.log.{os.getppid()}.0a1b2c3d4e5f.tmp"  # another live writer's
    other = tmp_path / f".repairs.logs.{gone}.0a1b2c3d4e5f.tmp"  # another file's
    for p in (dead, mine, live, other):
        p.write_bytes(b"x")
    assert clear_replace_temps(target) == 2
    assert _names(tmp_path) == sorted([live.name, other.name])


def test_the_repair_log_is_rewritten_through_the_one_writer(tmp_path: Path) -> None:
    """The log's rewrite (thousands of lines, handed over in pieces) keeps its format, line for
    line, and leaves no temp."""
    import sqlite3

    db = sqlite3.connect(":memory:")
    db.executescript("CREATE TABLE samples (id INTEGER PRIMARY KEY, sid TEXT);"
                     "CREATE TABLE repairs (sample INTEGER, lost INTEGER, since REAL);")
    db.executemany("INSERT INTO samples VALUES (?, ?)", [(i, f"{i:064x}") for i in range(1, 2501)])
    db.executemany("INSERT INTO repairs VALUES (?, ?, ?)", [(i, i % 2, 1.5 * i) for i in range(1, 2501)])
    assert repairlog.rewrite(db, tmp_path) == 2500
    lines = repairlog.path_of(tmp_path).read_text(encoding="ascii").splitlines()
    assert lines[0] == f'[1,"{1:064x}",{repairlog.LOST},1.5]'
    assert lines[1] == f'[2,"{2:064x}",{repairlog.WAITING},3.0]' and len(lines) == 2500
    assert len(repairlog.load(tmp_path)) == 2500
    assert _names(repairlog.path_of(tmp_path).parent) == [repairlog.LOG_NAME]
