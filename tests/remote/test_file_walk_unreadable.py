"""A ``file://`` folder that cannot be read fails the listing: a relist that ended without it would
be complete, and would drop that folder's keys from the catalog (an NFS or FUSE mount answering
EIO or ESTALE for a moment, a folder whose permissions changed).

The folder is made unreadable for real: ``chmod 000`` and a listing run as another user, since
root reads any folder. The listing runs in a forked child that drops root's rights, against a
real :class:`~epochfs.sidecar.store.Store` and :class:`~epochfs.sidecar.listing.Lister`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from epochfs.sidecar.listing.lister import Lister
from epochfs.sidecar.listing.sources import SerialSource
from epochfs.sidecar.remote.base import RemoteError
from epochfs.sidecar.remote.file import FileRemote
from epochfs.sidecar.store import Store

NOBODY = 65534


def _list_as_another_user(url: str, cache: Path, *, fresh: bool) -> dict[str, Any]:
    """What one listing into the catalog at ``cache`` reports (or the error it raises), run in a
    forked child that has dropped root's rights: the interpreter itself may be under a folder only
    root reads, so the child runs the modules the test has already imported, not a new one."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read)
            if os.geteuid() == 0:
                os.setgid(NOBODY)
                os.setuid(NOBODY)
            store = Store(cache, create=True)
            said: dict[str, Any]
            try:
                report = Lister(store, SerialSource(FileRemote(url=url)), seed=1, threads=1).run(fresh=fresh)
                said = {"complete": report.complete, "total": report.total, "dropped": report.dropped}
            except Exception as e:
                said = {"error": type(e).__name__, "message": str(e), "cause": type(e.__cause__).__name__}
            os.write(write, json.dumps(said).encode())
            code = 0
        except BaseException:
            os.write(write, traceback.format_exc().encode())
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        out = f.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, out
    answer: dict[str, Any] = json.loads(out)
    return answer


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder another user can reach (pytest's tmp_path is under a folder only root can)."""
    top = Path(tempfile.mkdtemp(prefix="epochfs-unreadable-"))
    top.chmod(0o755)
    try:
        yield top
    finally:
        for folder in top.rglob("*"):
            if folder.is_dir():
                folder.chmod(0o755)
        shutil.rmtree(top)


def test_an_unreadable_folder_fails_the_relist_and_drops_nothing(shared: Path) -> None:
    root = shared / "ds"
    for folder in ("a", "b", "c"):
        (root / folder).mkdir(parents=True)
        for i in range(5):
            (root / folder / f"{i}.bin").write_bytes(b"x" * (i + 1))
    for made in (root, *root.iterdir()):
        made.chmod(0o755)
    cache = shared / "cache"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)
    url = root.as_uri()
    # The child imports nothing new (the interpreter's own library may be under a folder only root
    # reads): one listing of the same folders here, as root, imports what a listing imports later
    # (skew's statistics...), whichever tests this process ran before.
    warm = shared / "warm"
    with Store(warm, create=True) as store:
        Lister(store, SerialSource(FileRemote(url=url)), seed=1, threads=1).run(fresh=True)
    shutil.rmtree(warm)

    assert _list_as_another_user(url, cache, fresh=False) == {"complete": True, "total": 15, "dropped": 0}

    (root / "b").chmod(0o000)
    failed = _list_as_another_user(url, cache, fresh=True)
    assert failed.get("error") == "RemoteError", failed
    assert failed["message"].startswith(f"cannot list {url}: folder {root / 'b'}: EACCES "), failed
    assert failed["cause"] == "Denied", failed  # typed: the refusal's cause names the access

    # Readable again: the relist begun resumes, ends complete, and has dropped nothing.
    (root / "b").chmod(0o755)
    assert _list_as_another_user(url, cache, fresh=False) == {"complete": True, "total": 15, "dropped": 0}


def test_a_missing_root_fails_the_listing(tmp_path: Path) -> None:
    """The root gone after the remote was opened (a volume unmounted) is not an empty dataset."""
    root = tmp_path / "ds"
    root.mkdir()
    remote = FileRemote(url=root.as_uri())
    root.rmdir()
    with pytest.raises(RemoteError, match=f"folder {root}: ENOENT"):
        list(remote.list())


def test_a_folder_removed_mid_walk_is_not_a_failure(tmp_path: Path) -> None:
    """A folder removed after its parent was read: its keys are gone, and the walk goes on."""
    root = tmp_path / "ds"
    for folder in ("a", "b"):
        (root / folder).mkdir(parents=True)
        (root / folder / "x.bin").write_bytes(b"x")
    walk = FileRemote(url=root.as_uri()).list()
    assert str(next(walk).key) == "a/x.bin"  # the root was read: a and b are listed in it
    shutil.rmtree(root / "b")
    assert list(walk) == []
