"""A publisher killed (``kill -9``) while it puts a lost sample's placeholder into a published
epoch: the next start leaves the epoch's folders read-only (0555), as every published folder is.

The placeholder's rename needs the entry's folder writable for a moment; the kill lands in that
moment, exactly: the publisher runs in a child process whose audit hook (:func:`sys.addaudithook`)
sends itself SIGKILL when the placeholder's rename is about to happen."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from fuse_helpers import admit, open_store
from lost_helpers import make_lost

from epochfs.sidecar.folderview import FolderPublisher
from epochfs.sidecar.folderview_lost import SCRATCH_PREFIX
from epochfs.torchclient.lost import is_placeholder
from epochfs.torchclient.publish import DIR_MODE

LOST = "a/c/0003.bin"

CHILD = """
import os, signal, sys
from pathlib import Path
from epochfs.sidecar.folderview import FolderPublisher
from epochfs.sidecar.store import Store

def kill_at_the_placeholders_rename(event, args):
    if event == "os.rename" and sys.argv[3] in str(args[0]):
        os.kill(os.getpid(), signal.SIGKILL)

cache, folder = Path(sys.argv[1]), Path(sys.argv[2])
with Store(cache) as store:
    publisher = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir.absolute())
    publisher.recover()
    sys.addaudithook(kill_at_the_placeholders_rename)
    publisher.step(force_status=True)
"""


def modes(epoch: Path) -> dict[str, int]:
    return {os.path.relpath(d, epoch): stat.S_IMODE(os.stat(d).st_mode) for d, _, _ in os.walk(epoch)}


def test_a_kill_while_placing_a_placeholder_leaves_no_writable_folder_once_restarted(tmp_path: Path) -> None:
    cache, folder = tmp_path / "cache", tmp_path / "view"
    store = open_store(cache)
    try:
        admit(store, {f"a/{'bc'[i % 2]}/{i:04d}.bin": bytes([i]) * 100 for i in range(8)})
        assert store.cut(0) == 0
        publisher = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir.absolute())
        publisher.recover()
        publisher.step(force_status=True)
        epoch = folder / "epoch-0"
        assert set(modes(epoch).values()) == {DIR_MODE}
        make_lost(store, LOST)
        child = subprocess.run([sys.executable, "-c", CHILD, str(cache), str(folder), SCRATCH_PREFIX],
                               capture_output=True, text=True, timeout=120)
        assert child.returncode == -9, (child.returncode, child.stderr[-3000:])
        assert modes(epoch)["a/c"] != DIR_MODE, "killed while the entry's folder was writable"
        assert not is_placeholder(epoch / LOST)

        again = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir.absolute())
        report = again.recover()
        assert report.stale == []
        again.step(force_status=True)
        assert is_placeholder(epoch / LOST)
        assert set(modes(epoch).values()) == {DIR_MODE}, modes(epoch)
        assert not [n for n in os.listdir(folder) if n.startswith(SCRATCH_PREFIX)]
    finally:
        store.close()
