"""What the folder view's publisher reports: :class:`Recovery` from its start-up, :class:`Step`
from each pass.

Apart from :mod:`.folderview_publisher` because they are plain records, read by whoever runs the
publisher (:mod:`.folderview` steps again soon while :attr:`Step.pending`), with no part in how the
folder is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Recovery:
    """What :meth:`~.folderview_publisher.FolderPublisher.recover` removed at start-up."""

    leftovers: list[str] = field(default_factory=list)
    """Temporary names of an interrupted build, retirement or replacement."""
    stale: list[int] = field(default_factory=list)
    """Visible epochs the store no longer holds, or that did not match it (rebuilt)."""
    foreign: list[int] = field(default_factory=list)
    """``epoch-N/`` folders the publisher did not write (:func:`.volumes.published_epoch`): left
    as they are, never removed."""


@dataclass
class Step:
    """What one :meth:`~.folderview_publisher.FolderPublisher.step` changed."""

    published: list[int] = field(default_factory=list)
    retired: list[int] = field(default_factory=list)
    latest: int | None = None
    ahead: list[int] = field(default_factory=list)
    """Of ``published``, the epochs shown from the tree built ahead (the rest were written whole)."""
    pending: bool = False
    """The tree built ahead has linking left to do: step again soon."""


__all__ = ["Recovery", "Step"]
