"""An epoch a reader is inside stays whole (issue 11, item 4), on a real mount.

Two ways to be "inside": reading from the epoch within the in-use window (default 600 s; a reader
that stops may pause at least ``guaranteed_pause`` = 390 s), or holding a folder of the epoch open
(the torch client does, for the epoch it iterates), which keeps it whole however long the pause.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import time
from pathlib import Path

import pytest
from common import ROOT, wait_until
from fuse_helpers import admit, make_objects, mounted, open_store

from epochfs.fuse.server import cache_timeout, guaranteed_pause, read_debounce
from epochfs.sidecar.config import SamplerSettings
from epochfs.sidecar.store import Policy, Store

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]


def last_read(cache: Path, n: int) -> float:
    db = sqlite3.connect(f"file:{cache / 'index.sqlite'}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT last_read FROM epochs WHERE n=?", (n,)).fetchone()
        return float(row[0]) if row else 0.0
    finally:
        db.close()


def manifest_rows(mnt: Path, n: int) -> list[tuple[str, int, str]]:
    lines = (mnt / ".epochfs" / f"epoch-{n}.manifest").read_text().splitlines()[1:]
    return [(p, int(s), c) for p, s, c in (line.split("\t") for line in lines)]


def read_checked(mnt: Path, n: int, rows: list[tuple[str, int, str]]) -> int:
    """Read every listed file through the mount; each must have its manifest size and checksum."""
    for path, size, checksum in rows:
        data = (mnt / f"epoch-{n}" / path).read_bytes()
        assert len(data) == size and "md5:" + hashlib.md5(data).hexdigest() == checksum, path
    return len(rows)


PAUSE = 300.0
"""A pause every reader must survive with the default window: a checkpoint, a validation pass."""


def test_the_default_window_is_generous_and_the_docs_say_it() -> None:
    window = Policy(capacity=1).in_use_seconds
    assert SamplerSettings.__dataclass_fields__["in_use_seconds"].default == window == 600
    pause = guaranteed_pause(window)
    assert pause >= PAUSE, "a checkpoint or a validation pass must fit"
    assert (cache_timeout(window), read_debounce(window), pause) == (200, 10, 390)
    for doc in ("docs/mount.md", "docs/torchclient.md", "docs/reliability.md"):
        text = " ".join((ROOT / doc).read_text().split())
        assert re.search(r"default 600 s", text), f"{doc} must give the default window"
        assert "390 s" in text, f"{doc} must give the pause it guarantees"


def test_a_reader_paused_mid_epoch_past_the_old_window_reads_every_listed_file(tmp_path: Path) -> None:
    """Half the epoch read, then a five-minute pause (a checkpoint, a validation pass) during which
    newer epochs are cut and the sampler retires what is unpinned (the old window was 30 s): the
    rest of the epoch is still there, byte for byte. Time is driven through the store's ``now``."""
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = Store(cache, create=True)
    store.configure(Policy(capacity=1 << 30, keep_epochs=1))  # the default in-use window
    admit(store, make_objects(40, 2000, seed=4))
    store.cut(0)
    with mounted(cache, mnt):
        rows = manifest_rows(mnt, 0)
        assert read_checked(mnt, 0, rows[:20]) == 20
        wait_until(lambda: last_read(cache, 0) > 0, timeout=10, what="the reads of epoch 0 recorded")
        # The pause: newer epochs are cut, and the sampler's retirement runs again and again.
        pause = PAUSE
        for n in (1, 2, 3):
            admit(store, make_objects(2, 2000, start=100 + 2 * n, seed=n))
            assert store.cut(n) == n
            assert 0 not in store.retire(now=time.time() + pause * n / 3)
        assert 0 in {e.epoch for e in store.epochs()}
        assert read_checked(mnt, 0, rows[20:]) == 20
        # The window is finite: once nobody has read epoch 0 for longer than it, it retires.
        assert store.retire(now=time.time() + store.policy().in_use_seconds + 1) == [0]
        wait_until(lambda: not os.path.exists(mnt / "epoch-0"), timeout=10, what="epoch 0 gone")
    store.close()


@pytest.mark.long
def test_an_epoch_held_open_stays_whole_however_long_the_pause(tmp_path: Path) -> None:
    """A folder handle inside epoch 0 is a reader inside it: the server renews epoch 0's pin while
    the handle is open (a 2 s window here, so the renewals show in seconds), through newer cuts and
    retirements; closed, the epoch retires once the window has passed."""
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    window = 2.0
    store = open_store(cache, keep_epochs=1, in_use_seconds=window)
    admit(store, make_objects(12, 500, seed=6))
    store.cut(0)
    with mounted(cache, mnt):
        rows = manifest_rows(mnt, 0)
        held = os.open(mnt / "epoch-0" / "train", os.O_RDONLY | os.O_DIRECTORY)
        try:
            start = time.time()
            for n in (1, 2):
                admit(store, make_objects(1, 500, start=50 + n, seed=n))
                assert store.cut(n) == n
            # Renewed while held: recorded reads of epoch 0 go on well past the window's end.
            wait_until(lambda: last_read(cache, 0) > start + 3 * window, timeout=30,
                       what="epoch 0's pin renewed past three windows while held")
            assert 0 not in store.retire()  # epoch 1, never read, retires: epoch 0 stays
            assert read_checked(mnt, 0, rows) == len(rows)
        finally:
            os.close(held)
        wait_until(lambda: 0 in store.retire(), timeout=30, what="epoch 0 retired once released")
        wait_until(lambda: not os.path.exists(mnt / "epoch-0"), timeout=10, what="epoch 0 gone")
    store.close()
