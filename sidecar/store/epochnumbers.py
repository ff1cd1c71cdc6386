"""The numbers an epoch may take: where the next one starts, how far a cut may jump, the limit.

Apart from :mod:`.epochs` (the cut itself) because the rule is read on its own: the store's
exports (``MAX_JUMP``, which the cut-request endpoint quotes), the recovery's clean-up of epochs
cut above the limit before it was enforced, and every cut's check of its number.
"""

from __future__ import annotations

import sqlite3

from epochfs.sidecar.store.hwm import MAX_EPOCH

MAX_JUMP = 1000
"""Epochs a cut may jump above the next one (a resumed trainer starting at epoch 7 while the
cache holds 0-2): more is refused unless an operator asks (``epochfs cut --far``), as a far
number is most often a step count passed as the epoch."""


def check_number(n: int, next_n: int, *, far: bool) -> None:
    """ValueError naming the limit for an epoch number that may not be cut: negative, above
    :data:`MAX_EPOCH`, or (unless ``far``) more than :data:`MAX_JUMP` above ``next_n``."""
    if n < 0:
        raise ValueError("epoch numbers start at 0")
    if n > MAX_EPOCH:
        raise ValueError(f"epoch {n} is above the largest epoch number {MAX_EPOCH:,} (the view has "
                         "no inode numbers past it)")
    if n > next_n + MAX_JUMP and not far:
        raise ValueError(f"epoch {n} is {n - next_n:,} above the next epoch {next_n}: a jump of more "
                         f"than {MAX_JUMP:,} epochs is refused (a step count passed as the epoch?); an "
                         f"operator may cut it with epochfs cut --epoch {n} --far")


def drop_out_of_range(db: sqlite3.Connection) -> list[int]:
    """Remove the epochs numbered above MAX_EPOCH (cut before the limit was enforced: the view
    never showed them, having no inode numbers for them, and every later cut was refused below
    them); returns their numbers."""
    gone = [int(r[0]) for r in db.execute("SELECT n FROM epochs WHERE n > ?", (MAX_EPOCH,))]
    for table in ("epoch_samples", "epoch_excluded"):
        db.execute(f"DELETE FROM {table} WHERE epoch > ?", (MAX_EPOCH,))
    db.execute("DELETE FROM epochs WHERE n > ?", (MAX_EPOCH,))
    db.execute("DELETE FROM cut_requests WHERE n > ?", (MAX_EPOCH,))
    return gone


def next_epoch(newest: int | None) -> int:
    """The one epoch number a lookup may cut: the one after the newest (0 for the first)."""
    return 0 if newest is None else newest + 1
