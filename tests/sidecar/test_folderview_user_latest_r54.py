"""A user's ``latest`` in the folder view's ``--mount`` is never replaced nor removed (review 54,
fixer A54a).

Before: a *file* named ``latest`` (a checkpoint pointer, say) was silently replaced by the
publisher's symlink, and a *folder* named ``latest/`` crash-looped the publisher
(``IsADirectoryError`` in its recovery, restarted for ever). The rule that already holds for a
user's ``epoch-N/``, "what epochfs did not publish it never removes", holds for ``latest`` too: it
is left as it is with one warning, the epochs are published without ``latest``, and once the user
moves it away the publisher's ``latest`` comes back.

A real store and real ``epochfs publish`` processes, stopped and restarted over the same folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from common import wait_until
from fuse_helpers import EPOCHFS, admit, make_objects, open_store

from epochfs.sidecar.store import Store
from epochfs.torchclient import layout

WARNING = "is not a symlink epochfs made"


class Publisher:
    """One ``epochfs publish`` process; its exit while a test waits fails the test at once."""

    def __init__(self, store: Store, folder: Path, log: Path) -> None:
        self.log = log
        argv = [*EPOCHFS, "--log-level", "INFO", "publish", "--cache", str(store.root),
                "--mount", str(folder)]
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def wait(self, check: Callable[[], object], what: str) -> None:
        def running() -> object:
            assert self.proc.poll() is None, (f"the publisher exited {self.proc.returncode} ({what}):\n"
                                              f"{self.log.read_text()[-3000:]}")
            return check()

        wait_until(running, timeout=60, what=what)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        assert self.proc.returncode == 0, self.log.read_text()[-3000:]


def _latest(folder: Path) -> str | None:
    path = folder / layout.LATEST_NAME
    return os.readlink(path) if path.is_symlink() else None


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_a_users_latest_is_left_as_it_is_and_the_epochs_are_published_without_it(
        tmp_path: Path, kind: str) -> None:
    store = open_store(tmp_path / "cache")
    admit(store, make_objects(10, 64, prefix="train/a/"))
    assert store.cut(0) == 0
    folder = tmp_path / "view"
    log = tmp_path / "publish.log"
    pub = Publisher(store, folder, log)
    try:
        pub.wait(lambda: _latest(folder) == "epoch-0", "epoch 0 and its latest")
        pub.stop()
        # The user's own latest, where the publisher's was.
        latest = folder / layout.LATEST_NAME
        latest.unlink()
        if kind == "file":
            latest.write_text("step=1200 ckpt=ckpt/1200.pt\n")
            mine = {".": latest.read_bytes()}
        else:
            latest.mkdir()
            (latest / "model.pt").write_bytes(b"weights")
            mine = {"model.pt": b"weights"}

        def kept() -> dict[str, bytes]:
            if kind == "file":
                return {".": latest.read_bytes()}
            return {name: (latest / name).read_bytes() for name in os.listdir(latest)}

        def warned() -> bool:
            assert not latest.is_symlink(), "the user's latest was replaced by the publisher's symlink"
            return WARNING in log.read_text()

        pub = Publisher(store, folder, log)  # recovery meets it first
        pub.wait(warned, "the warning about the user's latest")
        admit(store, make_objects(5, 64, prefix="train/b/", start=10))
        assert store.cut(1) == 1
        pub.wait(lambda: layout.list_epochs(folder) == [0, 1], "epoch 1 published without latest")
        assert not latest.is_symlink() and kept() == mine, "the user's latest left as it was"
        text = log.read_text()
        assert text.count(WARNING) == 1, text[-3000:]  # once, not at every step
        assert str(latest) in text and "move it out of the folder view" in text, text[-3000:]
        assert "Traceback" not in text, text[-3000:]
        # Moved away by the user: the publisher's latest comes back, on the newest epoch.
        if kind == "file":
            latest.rename(tmp_path / "latest.mine")
        else:
            latest.rename(tmp_path / "latest-mine")
        pub.wait(lambda: _latest(folder) == "epoch-1", "the publisher's latest back")
    finally:
        pub.stop()
        store.close()
