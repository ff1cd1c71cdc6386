"""Opens of object files by their resolved paths keep their epoch in use (DESIGN.md: "any epoch in
use (seen through lookups, or through opens of its objects counted outside the data path) are
pinned").

A reader that resolved an epoch's links once and opens ``<cache>/objects-ro/...`` paths later goes
past the view: no lookup, no folder held. The sidecar's open counter (real fanotify here) hands the
opened files' names to :class:`ReadRecords`, which records a read of the newest live epoch holding
each. The cache: ``--keep-epochs 1``, epoch 0 = k0..k6, epoch 1 = k3..k9 (a 700-byte budget), so
k0..k2 are epoch 0's own; epoch 0's last read is set long ago, so only a new record keeps it.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

import pytest
from common import wait_until
from store_helpers import put, sid_of

from epochfs.sidecar.served import OpenCounter
from epochfs.sidecar.served_pins import MAX_NAMES, MAX_NOTED, ReadRecords
from epochfs.sidecar.store import Policy, Store
from epochfs.sidecar.store.epochpins import RETIRE_GRACE, epochs_read
from epochfs.torchclient.report import HEARTBEAT

fanotify = pytest.mark.skipif(os.geteuid() != 0, reason="fanotify needs CAP_SYS_ADMIN")


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "cache", create=True)
    s.configure(Policy(capacity=1000, keep_epochs=1, headroom=0.3, in_use_seconds=300.0))
    for i in range(7):
        put(s, f"k{i}")
    assert s.cut(0) == 0
    for i in range(7, 10):
        put(s, f"k{i}")
    assert s.cut(1) == 1
    assert [f.path for f in s.epoch_files(1)] == [f"k{i}" for i in range(3, 10)]
    assert s.record_read(0, now=time.time() - 1000.0)  # out of the window: epoch 0 may retire
    return s


def _last_read(store: Store, n: int) -> float:
    with sqlite3.connect(store.root / "index.sqlite") as db:
        return float(db.execute("SELECT last_read FROM epochs WHERE n=?", (n,)).fetchone()[0])


def _read_long_ago(store: Store, n: int) -> None:
    """Epoch ``n`` last read 1000 s ago, out of any window (a record dated earlier than the one
    kept does not replace it, so the row is written directly)."""
    with sqlite3.connect(store.root / "index.sqlite") as db:
        db.execute("UPDATE epochs SET last_read=? WHERE n=?", (time.time() - 1000.0, n))


def test_opened_samples_name_the_epochs_read(store: Store) -> None:
    """Epoch 1 is kept (--keep-epochs 1): its samples need nothing; epoch 0's own name it."""
    assert store.epochs_opened([sid_of("k0")]) == {0}
    assert store.epochs_opened([sid_of("k3"), sid_of("k9")]) == set()  # the kept epoch holds them
    assert store.epochs_opened([sid_of("k2"), sid_of("k5")]) == {0}
    assert store.epochs_opened([sid_of(f"k{i}") for i in range(3)] * 400) == {0}  # chunks of 500
    # Not samples: a stray name, a path, a name the file system gave undecodable bytes.
    assert store.epochs_opened(["not-a-sample", "../index.sqlite", "odd-\udcff"]) == set()
    store.retire(now=time.time() - RETIRE_GRACE - 1)  # a grace ago: its samples may go now
    put(store, "k10")  # admitted after the newest cut (evicting epoch 0, retired, for room)
    assert store.epochs_opened([sid_of("k10"), sid_of("k0")]) == set()


def test_a_reader_of_an_old_epoch_names_it_not_the_newer_ones_it_shares_files_with(tmp_path: Path) -> None:
    """Review r55: epochs 0 = k0..k6, 1 = k3..k9, 2 = k6..k12 (a 700-byte budget), epoch 2 kept.
    A reader of epoch 0 opens k0..k6; k3..k5 are epoch 1's too. Naming the newest holder kept
    epoch 1 (and its own k7..k9) in use for as long as epoch 0 was read; epoch 0 is named alone."""
    s = Store(tmp_path / "cache", create=True)
    s.configure(Policy(capacity=2000, keep_epochs=1, headroom=0.65, in_use_seconds=300.0))
    for n, keys in enumerate((range(7), range(7, 10), range(10, 13))):
        for i in keys:
            put(s, f"k{i}")
        assert s.cut(n) == n
    assert {f.path for f in s.epoch_files(1)} == {f"k{i}" for i in range(3, 10)}
    assert {f.path for f in s.epoch_files(2)} == {f"k{i}" for i in range(6, 13)}
    assert s.record_reads([0, 1], now=time.time() - 1000.0)
    assert s.epochs_opened([sid_of(f"k{i}") for i in range(7)]) == {0}
    assert s.epochs_opened([sid_of(f"k{i}") for i in (3, 4, 5)]) == {1}  # a tie: the newest
    reads = ReadRecords(s)
    reads.add([sid_of(f"k{i}") for i in range(7)])
    reads.tick()
    assert s.retire() == [1]


def test_two_readers_of_two_old_epochs_name_both() -> None:
    holding = {"a": {0}, "b": {0, 1}, "c": {1}, "d": {1, 2}, "e": {2}}
    assert epochs_read(holding, kept={2}) == {0, 1}
    assert epochs_read(holding, kept=set()) == {0, 1, 2}
    assert epochs_read({"a": {3, 4}}, kept=set()) == {4}
    assert epochs_read({}, kept={1}) == set()


def _counted(store: Store, reads: ReadRecords) -> OpenCounter:
    counter = OpenCounter(objects_dir=store.objects_dir, on_open=lambda _s, _b: None, precreate=False,
                          objects=reads)
    assert counter.start()
    return counter


@fanotify
def test_opening_an_old_epochs_own_files_keeps_it(store: Store) -> None:
    before = _last_read(store, 0)
    counter = _counted(store, ReadRecords(store))
    try:
        # The reader's resolved paths: the object files themselves, as objects-ro shows them.
        (store.objects_dir / sid_of("k1")[:2] / sid_of("k1")).read_bytes()
        wait_until(lambda: _last_read(store, 0) > before + 500, what="epoch 0's read recorded")
    finally:
        counter.stop()
    assert store.retire() == []
    assert [e.epoch for e in store.epochs()] == [0, 1]
    assert (store.objects_dir / sid_of("k1")[:2] / sid_of("k1")).exists()


@fanotify
def test_opening_only_shared_files_pins_no_old_epoch(store: Store) -> None:
    """A reader of the newest epoch opens files epoch 0 holds too: epoch 1, kept anyway, holds
    them, so nothing is recorded, and epoch 0, which nobody reads, still retires."""
    reads = ReadRecords(store)
    counter = _counted(store, reads)
    try:
        for key in ("k3", "k6", "k9"):
            (store.objects_dir / sid_of(key)[:2] / sid_of(key)).read_bytes()
        wait_until(lambda: reads.looks >= 1, what="a look at the opened objects")
    finally:
        counter.stop()
    assert store.retire() == [0]


def test_a_look_is_debounced_and_bounded(store: Store) -> None:
    """One look per debounce (10 s at most; a sixth of a shorter window), at most MAX_NAMES
    names gathered between two looks, and a record the index refused made at the next look."""
    now = [1000.0]
    reads = ReadRecords(store, clock=lambda: now[0])
    reads.add([sid_of("k0")])
    reads.tick()
    first = _last_read(store, 0)
    assert first > time.time() - 60
    _read_long_ago(store, 0)
    reads.add([sid_of("k1")])
    now[0] += 5.0
    reads.tick()  # within the 10 s debounce: nothing looked up yet
    assert _last_read(store, 0) < time.time() - 900
    now[0] += 5.0
    reads.tick()
    assert _last_read(store, 0) > time.time() - 60
    reads.add([f"{i:032x}" for i in range(MAX_NAMES + 10)])
    assert not reads.wanted()


def test_a_record_the_busy_index_refused_is_made_at_the_next_look(store: Store) -> None:
    now = [1000.0]
    reads = ReadRecords(store, clock=lambda: now[0])
    holder = sqlite3.connect(store.root / "index.sqlite", isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # another writer (the sampler) holds the write lock
        reads.add([sid_of("k0")])
        reads.tick()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert _last_read(store, 0) < time.time() - 900
    now[0] += 10.0
    reads.tick()  # no new open: the epoch it could not record is recorded now
    assert _last_read(store, 0) > time.time() - 60


def test_the_torch_clients_reports_record_reads_once_per_ten_seconds(store: Store) -> None:
    now = [1000.0]
    reads = ReadRecords(store, clock=lambda: now[0])
    reads.client_epochs((0,))
    assert _last_read(store, 0) > time.time() - 60
    _read_long_ago(store, 0)
    now[0] += 9.0
    reads.client_epochs((0,))
    assert _last_read(store, 0) < time.time() - 900
    now[0] += 1.0
    reads.client_epochs((0,))
    assert _last_read(store, 0) > time.time() - 60


def test_a_reported_read_keeps_its_epoch_until_the_clients_next_heartbeat(store: Store) -> None:
    """Review r55: on the folder view a paused EpochLoader names its epoch in a heartbeat every 30 s;
    with --in-use-seconds under 30 its epoch retired between two heartbeats. A reported read is
    dated a heartbeat (and a debounce) ahead, so the epoch stays until the next one is due."""
    store.configure(Policy(capacity=1000, keep_epochs=1, headroom=0.3, in_use_seconds=5.0))
    ReadRecords(store).client_epochs((0,))
    assert _last_read(store, 0) >= time.time() + HEARTBEAT
    # Just before the next heartbeat is due, nothing read epoch 0 for 30 s: it stays.
    assert store.retire(now=time.time() + HEARTBEAT) == []
    assert store.retire(now=time.time() + HEARTBEAT + 60.0) == [0]


def test_reports_naming_ever_new_epochs_keep_a_bounded_debounce(store: Store) -> None:
    """A report may name any epoch number: each one noted for the debounce was kept for ever (an
    exploratory run grew the sidecar by 20 MB with 320k new numbers). The newest MAX_NOTED stay
    debounced; an older one is recorded again at its next report, as after its debounce."""
    now = [1000.0]
    reads = ReadRecords(store, clock=lambda: now[0])
    for start in range(0, 5 * MAX_NOTED, 256):
        reads.client_epochs(range(10_000 + start, 10_000 + start + 256))
    assert len(reads._client_noted) == MAX_NOTED
    reads.client_epochs((0,))
    assert _last_read(store, 0) > time.time() - 60  # a new epoch: recorded at once
    _read_long_ago(store, 0)
    reads.client_epochs((0,))
    assert _last_read(store, 0) < time.time() - 900  # within its debounce: not again
