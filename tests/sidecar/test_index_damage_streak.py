"""The supervisor's count of the sampler's index-damage exits in a row (``supervisor/indexdamage``),
on a real cache folder whose ``epochs.hwm`` is raised by the store's own code, as a cut raises it:
exits with no cut between add up, a cut or a 30 s run ends the count, a crash neither adds nor
ends it.
"""

from __future__ import annotations

from pathlib import Path

from epochfs.sidecar.store import hwm
from epochfs.sidecar.supervisor.indexdamage import IndexDamages

STABLE = 30.0


def exit_(d: IndexDamages, cache: Path, *, damaged: bool = True, ran: float = 2.0) -> int:
    d.exited(cache, damaged=damaged, ran=ran, stable_after=STABLE)
    return d.in_row


def test_damages_with_no_cut_between_add_up_and_a_cut_ends_them(tmp_path: Path) -> None:
    hwm.raise_to(tmp_path, published=4)
    d = IndexDamages()
    assert [exit_(d, tmp_path) for _ in range(3)] == [1, 2, 3]
    assert d.total == 3 and d.mark == 4
    assert not d.proved(tmp_path, ran=5.0, stable_after=STABLE)
    hwm.raise_to(tmp_path, published=5)  # the next run cut epoch 5
    assert d.proved(tmp_path, ran=5.0, stable_after=STABLE)
    assert exit_(d, tmp_path) == 1  # it met damage after its cut: a new count
    assert d.total == 4 and d.mark == 5


def test_isolated_damages_each_followed_by_a_cut_never_pass_one(tmp_path: Path) -> None:
    d = IndexDamages()
    for n in range(6):
        hwm.raise_to(tmp_path, published=n)
        assert exit_(d, tmp_path) == 1
    assert d.total == 6


def test_a_long_run_ends_the_count_and_a_crash_neither_adds_nor_ends_it(tmp_path: Path) -> None:
    d = IndexDamages()  # no epochs.hwm: no cut ever
    assert exit_(d, tmp_path) == 1 and d.mark == -1
    assert exit_(d, tmp_path, damaged=False) == 1  # a crash after 2 s
    assert exit_(d, tmp_path) == 2
    assert d.proved(tmp_path, ran=STABLE, stable_after=STABLE)
    assert exit_(d, tmp_path, damaged=False, ran=STABLE + 1) == 0  # a good run, however it ended
    assert exit_(d, tmp_path) == 1 and d.mark == -1
    hwm.raise_to(tmp_path, published=0)  # the first cut ever, by the next run
    assert exit_(d, tmp_path) == 1 and d.mark == 0


def test_a_damaged_hwm_file_reads_as_no_cut(tmp_path: Path) -> None:
    d = IndexDamages()
    hwm.raise_to(tmp_path, published=3)
    assert exit_(d, tmp_path) == 1 and d.mark == 3
    (tmp_path / hwm.HWM_NAME).write_text("garbage\n")
    assert not d.proved(tmp_path, ran=1.0, stable_after=STABLE)
    assert exit_(d, tmp_path) == 2
