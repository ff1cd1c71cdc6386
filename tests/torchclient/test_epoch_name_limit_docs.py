"""docs/mount.md states the epoch-name limit the grammar has.

It said epoch names have "at most 18 digits"; the grammar (``torchclient/layout.py``, which the
FUSE view and the folder view's cut endpoint use too) takes at most 9, and no number above
``MAX_EPOCH``: a user told 18 would expect ``epoch-1000000000`` to be an epoch, and it names
nothing. The sentence is read from the page, so it cannot drift from the code again."""

from __future__ import annotations

import re
from pathlib import Path

from epochfs.torchclient.layout import MAX_EPOCH, epoch_name, parse_epoch_name

MOUNT_MD = Path(__file__).resolve().parents[2] / "docs" / "mount.md"


def test_the_documented_epoch_name_limit_is_the_grammars() -> None:
    text = " ".join(MOUNT_MD.read_text(encoding="utf-8").split())
    bullet = text[text.index("**Epoch names**"):]
    digits = re.search(r"at most (\d+) digits", bullet)
    assert digits is not None, "the page states the digit limit"
    assert int(digits.group(1)) == len(str(MAX_EPOCH))
    assert f"{MAX_EPOCH:,}" in bullet[:400], "and the largest number"
    assert parse_epoch_name(epoch_name(MAX_EPOCH)) == MAX_EPOCH
    assert parse_epoch_name(f"epoch-{MAX_EPOCH + 1}") is None
    assert parse_epoch_name("epoch-" + "1" * (len(str(MAX_EPOCH)) + 1)) is None
