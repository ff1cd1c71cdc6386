"""Removing the folder view's retired trees on a thread of their own, so that retiring never delays
a publish. The removal itself (published folders are ``0555``, opened up first) is
:func:`epochfs.torchclient.publish.remove_tree`, the publishing steps' one home; it is named here
too, where :class:`Remover` looks it up."""

from __future__ import annotations

import logging
import queue
import threading
from pathlib import Path

from epochfs.torchclient.publish import remove_tree

log = logging.getLogger("epochfs.folderview")

__all__ = ["Remover", "remove_tree"]


class Remover:
    """Removes renamed-away trees on a thread of its own, so retiring never delays a publish.
    What a kill interrupts is a temporary name that the next start's recovery removes."""

    def __init__(self) -> None:
        self._todo: queue.Queue[Path] = queue.Queue()
        self._thread: threading.Thread | None = None

    def put(self, path: Path) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="folderview-remover", daemon=True)
            self._thread.start()
        self._todo.put(path)

    def drain(self) -> None:
        """Wait until every tree handed over is gone."""
        if self._thread is not None:
            self._todo.join()

    def _run(self) -> None:
        while True:
            path = self._todo.get()
            try:
                remove_tree(path)
            except OSError as e:  # left for the next start's recovery
                log.warning("could not remove %s: %s", path, e)
            finally:
                self._todo.task_done()
