"""Run ``epochfs sidecar --view folder`` for real, with no privilege at all, and always stop it.

As root the sidecar is started through ``setpriv`` with every capability dropped (bounding set,
inheritable, ambient, so nothing is effective or permitted after exec) and no_new_privs set: it
can neither mount, nor use fanotify, nor pass a permission check it does not own. It keeps uid 0
because the test machine's Python lives under /root (0700), which another user cannot reach; the
container test (tests/deploy/test_container_pod.py) runs the image's sidecar as a non-root user. The
remote is a ``file://`` folder, so no S3 server is needed.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from common import free_port, wait_until
from sidecar_helpers import EPOCHFS, Sidecar

from epochfs.sidecar.folderview import FolderPublisher
from epochfs.sidecar.store import Store
from epochfs.torchclient import layout


def unprivileged(argv: list[str]) -> list[str]:
    """``argv`` without any capability and with no_new_privs when we are root; as is otherwise."""
    if os.geteuid() != 0:
        return argv
    return ["setpriv", "--no-new-privs", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all",
            *argv]


@contextlib.contextmanager
def owned_dir() -> Iterator[Path]:
    """A fresh folder (removed afterwards, published read-only folders included)."""
    path = Path(tempfile.mkdtemp(prefix="epochfs-folderview-"))
    try:
        yield path
    finally:
        for dirpath, _dirs, _files in os.walk(path):  # published folders are 0555
            with contextlib.suppress(OSError):
                os.chmod(dirpath, 0o755)
        shutil.rmtree(path, ignore_errors=True)


def write_remote(root: Path, objects: dict[str, bytes]) -> None:
    for key, body in objects.items():
        p = root / key
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(body)
    for dirpath, _dirs, files in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in files:
            os.chmod(os.path.join(dirpath, name), 0o644)


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``epochfs <args>`` as the unprivileged user."""
    return subprocess.run(unprivileged([*EPOCHFS, *args]), capture_output=True, text=True, check=check,
                          timeout=60)


def proc_status(pid: int) -> dict[str, str]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants, from /proc (children files)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            with contextlib.suppress(OSError):
                todo += [int(c) for c in (task / "children").read_text().split()]
    return found


@contextlib.contextmanager
def folder_sidecar(base: Path, remote: Path, *, extra: tuple[str, ...] = (), ready: bool = True,
                   expect_exit: int = 0) -> Iterator[Sidecar]:
    """``epochfs sidecar --view folder`` with its cache and folder under ``base``; yields once
    ready (unless ``ready`` is false), stops it with SIGTERM and checks the exit status."""
    cache, folder = base / "cache", base / "shared" / "view"
    folder.parent.mkdir(exist_ok=True)
    port = free_port()
    log = base / f"sidecar-{port}.log"
    argv = [*EPOCHFS, "--log-level", "DEBUG", "sidecar", "--view", "folder", "--remote", f"file://{remote}",
            "--cache", str(cache), "--mount", str(folder), "--health-port", str(port),
            "--link-root", str(cache / "objects"), "--concurrency", "4", *extra]
    env = {**os.environ, "EPOCHFS_PROGRESS_SECONDS": "1", "HOME": str(base)}
    with open(log, "wb") as out:
        proc = subprocess.Popen(unprivileged(argv), stdout=out, stderr=subprocess.STDOUT, env=env)
    car = Sidecar(proc, folder, cache, port, log)
    failed = True
    try:
        if ready:
            wait_until(lambda: car.get("/readyz")[0] == 200 or proc.poll() is not None, timeout=60,
                       what="/readyz")
            assert proc.poll() is None, f"sidecar exited {proc.returncode}:\n{car.log_text()[-5000:]}"
        yield car
        failed = False
    finally:
        started = time.monotonic()
        code = car.stop()
        took = time.monotonic() - started
        if failed:
            sys.stderr.write(f"--- sidecar log ({log}) ---\n{car.log_text()[-30000:]}\n")
        else:
            assert code == expect_exit, f"sidecar exit {code}:\n{car.log_text()[-5000:]}"
            assert took < 10, f"SIGTERM took {took:.1f}s"


def kill_child(car: Sidecar, name: str) -> int:
    """SIGKILL the named child of the supervisor; returns its pid."""
    pid = car.child_pid(name)
    assert pid is not None, car.health()
    os.kill(pid, signal.SIGKILL)
    return pid


# The next epoch built ahead against a whole build (test_folderview_ahead.py, _window.py).
def tree_of(base: Path) -> dict[str, str]:
    """Relative path -> symlink target (files) or mode (folders) of everything below ``base``."""
    out = {}
    for dirpath, _dirs, files in os.walk(base):
        rel = os.path.relpath(dirpath, base)
        out[rel + "/"] = oct(os.stat(dirpath).st_mode)
        for name in files:
            out[os.path.join(rel, name)] = os.readlink(os.path.join(dirpath, name))
    return out


def pair(store: Store, tmp_path: Path) -> tuple[FolderPublisher, FolderPublisher]:
    ahead = FolderPublisher(store=store, folder=tmp_path / "ahead", link_root=Path("/efs"), ahead=True,
                            grace=False)
    whole = FolderPublisher(store=store, folder=tmp_path / "whole", link_root=Path("/efs"), grace=False)
    for p in (ahead, whole):
        p.recover()
        p.step(force_status=True)
    return ahead, whole


def settle(p: FolderPublisher) -> None:
    """Step until the tree built ahead has nothing left to link (bounded: each step links some)."""
    for _ in range(1000):
        if not p.step().pending:
            return
    raise AssertionError("the tree built ahead never settled")


def same_epoch(ahead: FolderPublisher, whole: FolderPublisher, n: int) -> None:
    m = f".epochfs/epoch-{n}.manifest"
    assert (ahead.folder / m).read_bytes() == (whole.folder / m).read_bytes(), f"epoch {n}: manifests differ"
    assert tree_of(ahead.folder / f"epoch-{n}") == tree_of(whole.folder / f"epoch-{n}"), f"epoch {n}: trees"
    # Every folder a reader finds in the epoch has its class index (issue 22) when it appears.
    classes = layout.read_classes(ahead.folder)
    assert classes is not None
    for dirpath, dirs, _files in os.walk(ahead.folder / f"epoch-{n}"):
        rel = os.path.relpath(dirpath, ahead.folder / f"epoch-{n}")
        for d in dirs:
            assert d in classes[layout.ROOT_KEY if rel == "." else rel], (n, rel, d)


@contextlib.contextmanager
def small_tmpfs(vol: Path, *, size: str, inodes: int) -> Iterator[Path]:
    """A tmpfs of ``size`` with ``inodes`` inodes mounted at ``vol`` (made), a volume a test can
    fill for real; always unmounted."""
    vol.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},nr_inodes={inodes}", "tmpfs", str(vol)],
                   check=True)
    try:
        yield vol
    finally:
        subprocess.run(["umount", "-l", str(vol)], check=False)


def fill_inodes(vol: Path) -> list[Path]:
    """Empty files in ``vol`` until it has no inode left (ENOSPC); returns them."""
    made: list[Path] = []
    for i in range(10_000):
        path = vol / f"filler-{i}"
        try:
            path.touch()
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
            return made
        made.append(path)
    raise AssertionError("the volume never filled")


def cut(car: Sidecar, query: str) -> tuple[int, dict[str, Any]]:
    """A cut request to the sidecar's loopback port, as the torch client asks (``epoch=N``,
    ``epoch=next``...): its status and answer."""
    req = urllib.request.Request(f"{car.base}/v1/cut?{query}", data=b"", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return int(r.status), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def last_read(cache: Path, n: int) -> float:
    """When the store last recorded a read of epoch ``n`` (its ``epochs.last_read``)."""
    db = sqlite3.connect(f"file:{cache / 'index.sqlite'}?mode=ro", uri=True, timeout=30)
    try:
        return float(db.execute("SELECT last_read FROM epochs WHERE n=?", (n,)).fetchone()[0])
    finally:
        db.close()


@contextlib.contextmanager
def publishing(cache: Path, folder: Path, *,
               on_recovered: Callable[[], None] | None = None) -> Iterator[list[BaseException]]:
    """The loop ``epochfs publish`` runs (:func:`~epochfs.sidecar.folderview._publish_until`) on a
    thread of the test, over its own store of ``cache``, for the block; yields what it raised (the
    block asserts on it), and fails if it raised or did not stop."""
    from epochfs.sidecar import folderview

    stop = threading.Event()
    failed: list[BaseException] = []

    def publish() -> None:
        try:
            with Store(cache) as own:
                publisher = FolderPublisher(store=own, folder=folder, link_root=own.objects_dir, grace=False)
                try:
                    folderview._publish_until(stop, publisher, interval=0.02, on_recovered=on_recovered)
                finally:
                    publisher.close()
        except BaseException as e:  # shown by the caller's assertions
            failed.append(e)

    thread = threading.Thread(target=publish)
    thread.start()
    try:
        yield failed
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not thread.is_alive() and not failed, failed
