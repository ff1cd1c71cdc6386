"""Readers of an epoch already cut are answered while the index is damaged, never EIO for it.

Found by the 600 s soak (docs/reliability.md, "The stop-38 runs"): ``index.sqlite`` garbled on the
disk, and until the sampler replaced it (1-4 s) every lookup in an epoch cut just before the damage
whose tree was not built yet answered EIO (2.8 s of them), and lookups that asked the store for its
newest epoch got EIO too (485 of 116,766). The members file of every live epoch was on the disk,
checksummed, before the epoch became visible: the store now answers those reads from it
(sidecar/store/memberview.py: a chained file read through its base, as the rebuild reads it), and
the view keeps its epochs while the status cannot be read. A members file that fails its check is
never used: the index's error, EIO through the mount, as before.

No sampler runs here, so nothing replaces the damaged index while the test looks: the store and
the view in-process, and the real FUSE server (``epochfs mount``), over a real SQLite file with real
damage (garbage over pages picked with SQLite's ``dbstat``)."""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

import pytest
from fuse_helpers import admit, errno_of, make_objects, mounted, open_store
from store_helpers import garble

from epochfs.fuse.view import NotFound, View
from epochfs.sidecar.store import INDEX_NAME, FileEntry, Store
from epochfs.sidecar.store.memberfiles import path_of

COUNT = 600
PER_EPOCH = 200

def fill(cache: Path, epochs: int = 3) -> tuple[dict[str, bytes], dict[int, list[FileEntry]]]:
    """``epochs`` epochs of :data:`PER_EPOCH` more samples each (each file after the first chained
    on the one before: written by the cut); returns key -> bytes of every sample of :data:`COUNT`,
    and each epoch's files as the sound index lists them."""
    objects = make_objects(COUNT, 64)
    keys = sorted(objects)
    with open_store(cache, keep_epochs=5) as store:
        for n in range(epochs):
            admit(store, {k: objects[k] for k in keys[n * PER_EPOCH:(n + 1) * PER_EPOCH]})
            assert store.cut() == n
        assert all(path_of(cache, n).exists() for n in range(epochs))
        return objects, {n: store.epoch_files(n) for n in range(epochs)}


def garble_table(cache: Path, table: str) -> None:
    """Garbage over every page of a small ``table`` (``garble`` needs one of many leaves)."""
    index = cache / INDEX_NAME
    db = sqlite3.connect(index)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = [int(r[0]) for r in db.execute("SELECT pageno FROM dbstat WHERE name=?", (table,))]
        size = int(db.execute("PRAGMA page_size").fetchone()[0])
    finally:
        db.close()
    with open(index, "r+b") as f:
        for page in pages:
            f.seek((page - 1) * size)
            f.write(os.urandom(size))


def index_refuses(cache: Path, sql: str) -> bool:
    """The damaged index fails ``sql`` (a fresh connection: nothing of it cached)."""
    db = sqlite3.connect(f"file:{cache / INDEX_NAME}?mode=ro", uri=True)
    try:
        db.execute(sql).fetchall()
    except sqlite3.DatabaseError as e:
        return "malformed" in str(e)
    finally:
        db.close()
    return False


def flip_member_byte(path: Path) -> None:
    """Change one byte inside the first member line of a members file (its checksum then fails)."""
    data = bytearray(path.read_bytes())
    at = data.index(b"\n") + 40
    data[at] = ord("0") if data[at] != ord("0") else ord("1")
    path.write_bytes(bytes(data))


# ---------------------------------------------------------------------------- the store
def test_an_epochs_files_come_from_its_members_file_while_the_index_is_damaged(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _, before = fill(cache)
    with Store(cache) as store:
        infos = store.epochs()
        garble(cache, "samples")  # epochs 1 and 2 (ids 1-400, 1-600) cross the damaged pages
        assert index_refuses(cache, "SELECT * FROM samples")
        for n in (2, 1, 0):  # 2 and 1 are chained files: read through their bases
            assert store.epoch_files(n) == before[n], f"epoch {n}"
            assert list(store.iter_epoch_files(n)) == before[n], f"epoch {n}, streamed"
        assert store.epochs() == infos
        with pytest.raises(KeyError):
            list(store.iter_epoch_files(7))  # not live: as before


def test_live_epochs_and_the_newest_come_from_the_members_files_while_the_index_is_damaged(
        tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    fill(cache)
    with Store(cache) as store:
        infos = store.epochs()
        garble_table(cache, "epochs")
        assert index_refuses(cache, "SELECT MAX(n) FROM epochs")
        assert store.newest_epoch() == 2
        assert store.epochs() == infos, "numbers, counts and cut times from the files' first lines"


def test_a_damaged_members_file_is_never_used(tmp_path: Path) -> None:
    """Epoch 0's file fails its check: epoch 1 and epoch 2 (chained on it) answer the index's
    error, as before, never a part of their members; epoch 0's rows lie on pages the damage
    missed, so the index still lists them."""
    cache = tmp_path / "cache"
    _, before = fill(cache)
    flip_member_byte(path_of(cache, 0))
    with Store(cache) as store:
        garble(cache, "samples")
        assert store.epoch_files(0) == before[0]
        for n in (1, 2):
            with pytest.raises(sqlite3.DatabaseError, match="malformed"):
                store.epoch_files(n)
            with pytest.raises(sqlite3.DatabaseError, match="malformed"):
                list(store.iter_epoch_files(n))


# ---------------------------------------------------------------------------- the view
def test_an_epoch_cut_after_the_views_last_refresh_is_found_through_a_damaged_index(tmp_path: Path) -> None:
    """A lookup of an epoch the view has not seen asks the store for its newest and live epochs,
    then refreshes; with the ``epochs`` table damaged the status cannot be read, and the view takes
    the new epoch from the members files and answers it (as the FUSE server's request threads do)."""
    cache = tmp_path / "cache"
    objects, _ = fill(cache, epochs=2)
    keys = sorted(objects)
    with Store(cache, create=True) as store:
        view = View(store=store, link_root=store.objects_dir.absolute())
        assert sorted(view.snapshot.live) == [0, 1]
        with open_store(cache, keep_epochs=5) as sampler:
            admit(sampler, {k: objects[k] for k in keys[2 * PER_EPOCH:]})
            assert sampler.cut() == 2
        garble(cache, "samples")
        garble_table(cache, "epochs")
        with pytest.raises(sqlite3.DatabaseError):
            store.stats()

        assert view.getattr("/epoch-2").mode & 0o040000
        assert sorted(view.snapshot.live) == [0, 1, 2]
        middle = keys[COUNT // 2]
        assert Path(view.readlink(f"/epoch-2/{middle}")).read_bytes() == objects[middle]
        assert keys[-1].encode() in view.read_file("/.epochfs/epoch-2.manifest")
        with pytest.raises(NotFound):
            view.getattr("/.epochfs/epoch-9.manifest")  # above the newest: not found, not an error


# ---------------------------------------------------------------------------- a real mount
@pytest.mark.fuse
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and /dev/fuse")
def test_a_mount_reads_an_epoch_not_built_yet_through_a_damaged_index(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    objects, _ = fill(cache)
    keys = sorted(objects)
    with mounted(cache, tmp_path / "mnt") as m:
        assert sorted(os.listdir(m.path)) == [".epochfs", "epoch-0", "epoch-1", "epoch-2", "latest"]
        assert (m.path / "epoch-0" / keys[0]).read_bytes() == objects[keys[0]]  # epoch 0's tree built
        garble(cache, "samples")  # epoch 2's rows (ids 1-600) cross the damaged pages

        epoch = m.path / "epoch-2"
        middle = keys[COUNT // 2]
        assert (epoch / middle).stat().st_size == 64, "a lookup in the epoch not built yet"
        assert (epoch / middle).read_bytes() == objects[middle]
        listed = {os.path.relpath(os.path.join(d, f), epoch) for d, _, fs in os.walk(epoch) for f in fs}
        assert listed == set(keys)
        assert all((epoch / k).read_bytes() == objects[k] for k in keys), "every file's bytes"
        manifest = (m.path / ".epochfs" / "epoch-2.manifest").read_text()
        assert all(k in manifest for k in keys)

        # Epoch 1's file is chained on epoch 0's: a damaged base refuses it whole (EIO, as
        # before), never a part of the epoch; the tree of epoch 2 already built is kept.
        flip_member_byte(path_of(cache, 0))
        assert errno_of(lambda: os.stat(m.path / "epoch-1" / middle)) == errno.EIO
        assert errno_of(lambda: os.listdir(m.path / "epoch-1")) == errno.EIO
        assert (epoch / middle).read_bytes() == objects[middle]
