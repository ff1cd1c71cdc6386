"""A user's ``epoch-N/`` in the folder view is never taken for the store's epoch N: while it holds
the name, epoch N is not published, ``latest`` never points at it, and the publisher says so (an
error when the epoch becomes live, at most once a minute after, and the pause reason in the index
that ``epochfs status`` and /v1/cut show); once the folder is moved away epoch N is published.

Before the fix the user's folder counted as the published epoch N: it was never published (no
manifest) and ``latest`` pointed at the user's folder, with nothing reported.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from common import wait_until
from folderview_helpers import publishing
from fuse_helpers import admit, make_objects, open_store

from epochfs.sidecar.folderview import FolderPublisher
from epochfs.sidecar.store import Meta, Store
from epochfs.torchclient import layout


def _users_epoch(folder: Path, n: int) -> Path:
    (folder / f"epoch-{n}").mkdir()
    (folder / f"epoch-{n}" / "model.pt").write_bytes(b"w")
    return folder / f"epoch-{n}"


def _errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_users_epoch_folder_is_never_taken_for_the_live_epoch(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="epochfs")
    store = open_store(tmp_path / "cache", keep_epochs=5)
    admit(store, make_objects(4, 10))
    store.cut(0)
    folder = tmp_path / "view"
    publisher = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir, grace=False)
    publisher.recover()
    assert publisher.step().published == [0]
    users = _users_epoch(folder, 2)
    store.cut(1)
    assert publisher.step().published == [1]
    assert getattr(publisher, "blocked", None) is None and not _errors(caplog)
    store.cut(2)
    step = publisher.step()
    assert step.published == []
    assert not os.path.lexists(folder / "latest")  # never the user's folder (as for a failed publish)
    assert step.latest is None
    assert (users / "model.pt").read_bytes() == b"w" and os.listdir(users) == ["model.pt"]
    assert not layout.manifest_path(folder, 2).exists()
    errors = _errors(caplog)
    assert len(errors) == 1 and "epoch 2 is live but cannot be published" in errors[0], errors
    assert publisher.blocked is not None and "epoch-2" in publisher.blocked
    publisher.step(force_status=True)  # within the minute: said once
    assert len(_errors(caplog)) == 1
    # Moved away: epoch 2 is published, latest follows, the reason is gone.
    users.rename(tmp_path / "moved")
    step = publisher.step()
    assert step.published == [2] and step.latest == 2
    assert os.readlink(folder / "latest") == "epoch-2"
    assert layout.manifest_path(folder, 2).exists()
    assert publisher.blocked is None
    store.close()


def test_a_restarted_publisher_leaves_latest_off_the_users_folder(tmp_path: Path) -> None:
    """Recovery and a later step of a new publisher treat the folder the same way."""
    store = open_store(tmp_path / "cache", keep_epochs=5)
    admit(store, make_objects(4, 10))
    store.cut(0)
    folder = tmp_path / "view"
    first = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir, grace=False)
    first.recover()
    first.step()
    _users_epoch(folder, 1)
    store.cut(1)
    again = FolderPublisher(store=store, folder=folder, link_root=store.objects_dir, grace=False)
    assert again.recover().foreign == [1]
    step = again.step()
    assert step.published == [] and step.latest is None
    assert not os.path.lexists(folder / "latest")
    assert again.blocked is not None and "epoch-1" in again.blocked
    store.close()


def test_the_pause_reason_is_recorded_until_the_folder_is_moved_away(tmp_path: Path) -> None:
    store = open_store(tmp_path / "cache", keep_epochs=5)
    admit(store, make_objects(4, 10))
    store.cut(0)
    store.cut(1)
    store.close()
    folder = tmp_path / "view"
    folder.mkdir()
    (folder / ".epochfs").mkdir()  # a folder the view published before
    users = _users_epoch(folder, 1)
    with publishing(tmp_path / "cache", folder) as failed, Store(tmp_path / "cache") as reader:
        wait_until(lambda: failed or "epoch-1" in (reader.meta(Meta.PUBLISH_PAUSED) or ""), timeout=30,
                   what="the pause reason naming epoch-1")
        assert not failed, failed
        assert not os.path.lexists(folder / "latest")
        users.rename(tmp_path / "moved")
        wait_until(lambda: failed or (reader.meta(Meta.PUBLISH_PAUSED) is None
                                      and layout.manifest_path(folder, 1).exists()),
                   timeout=30, what="epoch 1 published once the folder moved")
        assert not failed, failed
        wait_until(lambda: os.path.islink(folder / "latest") and os.readlink(folder / "latest") == "epoch-1",
                   timeout=30, what="latest -> epoch-1")
