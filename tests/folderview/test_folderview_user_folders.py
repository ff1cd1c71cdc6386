"""The folder view never deletes a user's folders: a ``--mount`` that is not empty and was not
published by epochfs is refused at start (``epochfs sidecar --view folder`` and ``epochfs publish``,
exit 2, one line naming ``--mount``), as the FUSE view refuses a folder that is not empty; and the
publisher's recovery and retirement remove only the ``epoch-N/`` folders it wrote (a user's
``epoch-3/model.pt`` in a folder it published is left, with a warning), while a restart over its
own folder still removes its own stale epochs.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from common import wait_until
from folderview_helpers import folder_sidecar, owned_dir, unprivileged
from fuse_helpers import admit, make_objects, open_store
from sidecar_helpers import EPOCHFS

from epochfs.sidecar.config import ConfigError
from epochfs.sidecar.folderview import FolderPublisher
from epochfs.sidecar.volumes import check_view_folder
from epochfs.torchclient import layout

USER_FILES = {"epoch-0/model.pt": b"weights0", "epoch-3/model.pt": b"weights", "notes.txt": b"notes"}


def user_folder(folder: Path) -> None:
    """What a user keeps in a folder: checkpoints named like epochs, and a note."""
    for rel, body in USER_FILES.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(body)


def files_of(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def refused_line(log: str) -> str:
    lines = [line for line in log.splitlines() if "not empty" in line]
    assert len(lines) == 1, log[-5000:]
    return lines[0]


def test_the_sidecar_refuses_a_folder_of_the_users_files_and_deletes_none() -> None:
    with owned_dir() as base:
        remote = base / "remote"
        remote.mkdir()
        (remote / "a.bin").write_bytes(b"a" * 100)
        folder = base / "shared" / "view"
        folder.mkdir(parents=True)
        user_folder(folder)
        with folder_sidecar(base, remote, ready=False, expect_exit=2) as car:
            # Before the fix the sidecar ran and its publisher removed epoch-0/ and epoch-3/.
            wait_until(lambda: car.proc.poll() is not None or not (folder / "epoch-3").exists(),
                       timeout=60, what="the sidecar's exit")
            assert files_of(folder) == USER_FILES
            assert car.proc.wait(timeout=30) == 2
        line = refused_line(car.log_text())
        assert line.startswith(f"epochfs sidecar: --mount {folder}: not empty"), line
        assert sorted(os.listdir(folder)) == ["epoch-0", "epoch-3", "notes.txt"]  # nothing added


def test_publish_refuses_a_folder_of_the_users_files_and_deletes_none(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache")
    admit(store, make_objects(3, 10))
    store.cut(0)
    store.close()
    folder = tmp_path / "f3"
    folder.mkdir()
    user_folder(folder)
    argv = [*EPOCHFS, "publish", "--cache", str(tmp_path / "cache"), "--mount", str(folder)]
    proc = subprocess.Popen(unprivileged(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: proc.poll() is not None or not (folder / "epoch-3").exists(), timeout=60,
                   what="epochfs publish's exit")
        assert files_of(folder) == USER_FILES
    finally:
        if proc.poll() is None:
            proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 2, out
    assert refused_line(out).startswith(f"epochfs publish: --mount {folder}: not empty"), out


def test_an_empty_folder_and_one_epochfs_published_pass_the_start_check(tmp_path: Path) -> None:
    """A restart over what the publisher wrote before still starts (and recovers it)."""
    store = open_store(tmp_path / "cache")
    admit(store, make_objects(3, 10))
    store.cut(0)
    folder = tmp_path / "view"
    folder.mkdir()
    check_view_folder(folder, create=False)  # empty
    publisher = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir)
    publisher.recover()
    assert publisher.step().published == [0]
    check_view_folder(folder, create=True)  # what it published
    (folder / "notes.txt").write_text("mine")
    check_view_folder(folder, create=False)  # its .epochfs/ says it is the view's folder
    store.close()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match=r"^--mount .*/other: not empty, and not a folder the folder "
                                          r"view published \(no \.epochfs/ in it\)"):
        check_view_folder(other, create=True)


def test_recovery_and_retirement_leave_the_users_epoch_folders(tmp_path: Path) -> None:
    """Defence in depth: in a folder the publisher wrote, an ``epoch-N/`` it did not write (files
    rather than links, or no manifest) is never removed; its own stale epochs still are."""
    from epochfs.sidecar.volumes import published_epoch  # here: a missing one fails this test only

    store = open_store(tmp_path / "cache", keep_epochs=1, in_use_seconds=100.0)
    admit(store, make_objects(5, 10))
    store.cut(0)
    store.cut(1)
    folder = tmp_path / "view"
    first = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir, grace=False)
    first.recover()
    assert first.step().published == [0, 1]
    # The user's folders: a checkpoint at the top, one a folder down, a folder of links they made
    # (no manifest: not the publisher's), and one named after an epoch the store holds.
    (folder / "epoch-3").mkdir()
    (folder / "epoch-3" / "model.pt").write_bytes(b"weights")
    (folder / "epoch-4" / "sub").mkdir(parents=True)
    os.symlink("/elsewhere", folder / "epoch-4" / "a-link")
    (folder / "epoch-4" / "sub" / "model.pt").write_bytes(b"weights4")
    (folder / "epoch-5").mkdir()
    os.symlink("/elsewhere", folder / "epoch-5" / "a-link")
    assert not published_epoch(folder, 3) and not published_epoch(folder, 4)
    assert not published_epoch(folder, 5)
    assert published_epoch(folder, 0) and published_epoch(folder, 1)
    assert store.retire() == [0]  # while the publisher is down
    again = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir, grace=False)
    report = again.recover()
    assert report.stale == [0]  # its own stale epoch, removed as before
    assert report.foreign == [3, 4, 5]
    assert (folder / "epoch-3" / "model.pt").read_bytes() == b"weights"
    assert (folder / "epoch-4" / "sub" / "model.pt").read_bytes() == b"weights4"
    assert os.readlink(folder / "epoch-5" / "a-link") == "/elsewhere"
    assert os.readlink(folder / "latest") == "epoch-1"  # never a user's folder
    assert not (folder / "epoch-0").exists() and not layout.manifest_path(folder, 0).exists()
    # Retirement in a step leaves them too, and says so in its report.
    store.cut(2)
    assert store.retire() == [1]
    step = again.step()
    assert step.published == [2] and step.retired == [1]
    assert (folder / "epoch-3" / "model.pt").read_bytes() == b"weights"
    assert layout.list_epochs(folder) == [2, 3, 4, 5]
    store.close()
