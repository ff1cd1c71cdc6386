"""Removing the folder view's trees: published epochs' folders are ``0555`` (as the FUSE view
shows them), so a removal opens them up first; retired trees go on a thread of their own so that
retiring never delays a publish (issue 25)."""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import shutil
import threading
from pathlib import Path

log = logging.getLogger("epochfs.folderview")


def remove_tree(path: Path) -> None:
    """Remove a published tree (its folders are 0555, as the FUSE view shows them: opened up
    first, which only root could skip); nothing if it is gone."""
    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
        return
    with contextlib.suppress(FileNotFoundError):
        for dirpath, _dirs, _files in os.walk(path):
            os.chmod(dirpath, 0o755)
        shutil.rmtree(path)


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
