"""The publisher's tree built ahead, as one part of its step: made, brought up to the store for a
bounded time, shown as the next epoch, dropped until the next cut when it cannot stand for it
(:class:`~.folderview_built.Tainted`) or finds no room, and forgotten after a recovery.

Apart from :mod:`.folderview_publisher` (which calls it at each step and owns what must be in
place before an epoch appears: its manifest, ``classes.json``, the grace) so that each module
keeps to one concern: the trees themselves are :mod:`.folderview_ahead` (snapshot mode) and
:mod:`.folderview_window` (schedule mode).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from epochfs.sidecar.folderview_ahead import AheadTree
from epochfs.sidecar.folderview_built import FULL_ERRNOS, Tainted, WriteControl
from epochfs.sidecar.folderview_window import WindowTree, ahead_tree
from epochfs.sidecar.store.reader import FolderReader
from epochfs.torchclient.publish import TEMP_PREFIX

log = logging.getLogger("epochfs.folderview")


class AheadRun:
    """The next epoch's tree built ahead in ``folder`` (none when not ``enabled``), linked from
    the newest published epoch that ``newest`` names."""

    def __init__(self, *, store: FolderReader, folder: Path, link_root: Path, enabled: bool,
                 newest: Callable[[], Sequence[int]]) -> None:
        self.store = store
        self.folder = folder
        self.link_root = link_root
        self.enabled = enabled
        self._newest = newest
        self.tree: AheadTree | WindowTree | None = None
        self._off: frozenset[int] | None = None
        """The live epochs when the tree was dropped until the next cut (None: not dropped)."""

    def advance(self, live: frozenset[int] | None) -> bool:
        """Bring the tree up to the store for a bounded time; True while it has more to do. A tree
        that cannot stand for the next epoch is dropped until the next cut (``live`` changes);
        so is one that hit a full volume, removed at once (the room is the published epochs')."""
        if not self.enabled or (self._off is not None and self._off == live):
            return False
        if self.tree is None:
            self.tree = ahead_tree(store=self.store, folder=self.folder, link_root=self.link_root,
                                   temp_prefix=TEMP_PREFIX)  # a window in schedule mode
            for n in list(self._newest())[-1:]:  # after a restart too: link from what is published
                self.tree.rebase(n)
        try:
            self.tree.advance()
        except Tainted as e:
            log.info("no tree built ahead until the next cut (%s): the next epoch is written whole", e)
            self.drop()
            self._off = live or frozenset()
            return False
        except OSError as e:
            self.drop()
            if e.errno not in FULL_ERRNOS:
                raise
            # Not a pause: what is cut is published; built again each step, it paused it for good.
            log.info("no tree built ahead until the next cut: no room for it (%s); the next epoch is "
                     "written whole", e.strerror)
            self._off = live or frozenset()
            return False
        except BaseException:
            self.drop()
            raise
        return self.tree.pending()

    def drop(self) -> None:
        """Remove the tree on disk and forget it (its set too)."""
        if self.tree is not None:
            self.tree.discard()
            self.tree = None

    def forget(self) -> None:
        """The tree on disk is gone (recovery removed every temporary name): built again."""
        if self.tree is not None:
            self.tree.forget()

    def rebase(self, n: int) -> None:
        """Epoch ``n`` was published another way: link the next tree from it."""
        if self.tree is not None:
            self.tree.rebase(n)

    def publish(self, n: int, *, header: str, write_control: Callable[[AheadTree | WindowTree], WriteControl]
                ) -> bool:
        """Show epoch ``n`` from the tree; False when there is none or it cannot stand for it
        (then dropped). ``write_control`` gives, for the tree, what writes epoch M's control
        files before it is shown."""
        tree = self.tree
        if tree is None:
            return False
        try:
            return tree.publish(n, header=header, write_control=write_control(tree))
        except Tainted as e:
            log.info("epoch %d: %s; written whole", n, e)
            self.drop()
            return False
        except BaseException:
            self.drop()
            raise


__all__ = ["AheadRun"]
