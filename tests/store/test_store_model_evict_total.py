"""The store model's evictions against the reservations' kept total (found by the machine).

:class:`~epochfs.sidecar.reservations.Reservations` keeps the cache's total in memory and reads it
again after each eviction it makes; the sampler evicts only through it. The machine's ``evict`` rule
(and the ``evict`` op of a child killed with -9) calls :meth:`Store.evict` directly, so the total
kept by the reservations still counted the evicted bytes: the next download's reservation found the
cache fuller than it was, evicted again, and that eviction's retirement took an epoch (out of its
in-use window, beyond ``keep_epochs``: one the store may retire at any tick) that the model, which
retires only when it evicts, kept live. The store kept its promises; the harness now does what the
sampler does after an eviction (:meth:`Reservations.reconcile`). These are the two sequences the
machine found, cut down to what shows it.
"""

from __future__ import annotations

from pathlib import Path

from test_store_model import CAPACITY, KEYS, ChildPlan, CrashPoint, StoreMachine


def _two_epochs(base: Path) -> StoreMachine:
    """Epoch 0 holds 000 (2,100 bytes), epoch 1 only 001 (1,000: with 000 it would pass the
    3,072-byte epoch budget); keep one epoch, so epoch 0 may retire and 000 be evicted."""
    m = StoreMachine(base)
    m.setup(keep=1, headroom=0.25, min_samples=1, in_use=60.0)
    m.fetch_one(0, 2100)
    m.cut("default", 0, False)
    m.fetch_one(1, 1000)
    m.cut("default", 0, False)
    assert [f[0] for f in m.model.epochs[1].files] == [KEYS[1]]
    m.check_all()
    return m


def test_a_download_after_an_eviction_evicts_and_retires_nothing_more(tmp_path: Path) -> None:
    """Evict 000 (epoch 0 retires), cut epoch 2, download 2,000 bytes: 3,000 of 4,096 are taken,
    so nothing is evicted and epoch 1 stays. With the evicted 2,100 bytes still counted, the
    reservation evicted and retired epoch 1 (the machine: ``[37] == [22, 37]``)."""
    m = _two_epochs(tmp_path)
    try:
        m.retire(0.0)  # at the machine's clock, far ahead: its grace is no bar to the eviction
        m.evict(CAPACITY)
        assert KEYS[0] not in m.model.samples and m.model.epochs[0].retired
        m.cut("default", 0, False)
        m.fetch_one(2, 2000)
        m.check_all()
        assert m.model.live() == [1, 2]
    finally:
        m.teardown()


def test_a_killed_sampler_that_evicted_then_downloaded_leaves_a_committed_state(tmp_path: Path) -> None:
    """The same in a child killed with -9 once done (the machine: "after kill -9 the store equals
    none of the states the child could have committed": epoch 1 retired by the download)."""
    m = _two_epochs(tmp_path)
    try:
        child = ChildPlan(m)
        child.retire(m.clock)  # as above: epoch 0 retires at the far clock, its samples may go
        child.evict(CAPACITY)
        child.cut(None)
        assert child.download(KEYS[2], 2000)
        m.crash_and_recover(child, CrashPoint(len(child.ops), "statement", 1))
        m.check_all()
        assert m.model.live() == [1, 2]
    finally:
        m.teardown()
