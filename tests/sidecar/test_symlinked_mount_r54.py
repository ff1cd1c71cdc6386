"""A ``--mount`` or ``--cache`` given as a symlink is checked as the folder it names (review R54,
A54b), through the real command line.

* A ``--mount`` linked into a ``file://`` remote's folder started the sidecar (the direct path was
  refused): the view's own files became samples, recursively (``view/epoch-2/view/epoch-0/...``).
  A ``--mount`` linked to the cache's ``tmp/`` published there (the FUSE view and ``epochfs
  mount`` too), which the next sampler start deletes; a ``--cache`` linked into the remote's folder
  had its index and lock listed as samples. The cause: the placement checks spelled a path with its
  parent's links resolved but not its own (right for a dead FUSE mount point, which may not be
  stat'ed), so the link was taken for the folder beside the remote and the cache it sits in.
* A ``--mount`` (or ``--cache``) that is a dangling symlink was refused in words that hid it:
  ``publish`` "cannot create it: File exists", the sidecar "cannot write in it: no such file or
  directory". It is now named: a symlink to a missing folder, that folder named, exit 2.
* What must not change: a link to a FUSE mount point whose server is frozen or dead is spelled as
  that mount point without asking the server (``readlink`` only, never a ``stat``), and a server
  restarted at the link after a SIGKILL cleans the dead mount and serves again.

Real processes (the console script, a real FUSE server for the last test), small ``file://``
datasets, real caches made by the store.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from common import free_port
from fuse_helpers import admit, freeze, make_objects, mounted, open_store

from epochfs.fuse.mounting import find_mount, lazy_unmount
from epochfs.sidecar.store import Store

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
GUARD = 120.0
"""Seconds after which a command that should have answered at once is killed, so that a missing
refusal (or a lookup stuck on a frozen FUSE server) fails the test instead of hanging it."""
A_CHILD = r"started (sampler|publisher|fuse) \(pid|publishing .* into |serving .* at "
"""A line saying a child started, the publisher began to write or the FUSE server mounted: a
refusal at the start has none."""
NEEDS_FUSE = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                                reason="the FUSE view needs root and /dev/fuse")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}


def _run_until(argv: list[str]) -> tuple[int, str, bool]:
    """Run ``epochfs ARGV`` until it exits or starts a child (then it is stopped: the refusal is
    missing); its status, its output and whether a child was started."""
    proc = subprocess.Popen([EPOCHFS, "--log-level", "INFO", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=_env())
    guard = threading.Timer(GUARD, proc.kill)
    guard.start()
    lines: list[str] = []
    started = False
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if re.search(A_CHILD, line):
                started = True
                proc.terminate()
                break
        proc.communicate(timeout=GUARD)
    finally:
        guard.cancel()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return proc.returncode, "".join(lines), started


def _last(text: str) -> str:
    return text.strip().splitlines()[-1] if text.strip() else ""


def _dataset(tmp_path: Path) -> Path:
    remote = tmp_path / "data"
    (remote / "train").mkdir(parents=True)
    for i in range(3):
        (remote / "train" / f"{i}.bin").write_bytes(bytes([i]) * 100)
    return remote


def _sidecar(view: str, remote: Path, cache: Path, mount: Path, tmp_path: Path) -> list[str]:
    return ["sidecar", "--view", view, "--remote", f"file://{remote}", "--cache", str(cache),
            "--mount", str(mount), "--capacity", "1Mi", "--health-port", str(free_port()),
            "--kube-reporting", "0", "--termination-log", str(tmp_path / "termination-log")]


def _skip_without_fuse(view: str) -> None:
    if view == "fuse" and (os.geteuid() != 0 or not os.path.exists("/dev/fuse")):
        pytest.skip("the FUSE view needs root and /dev/fuse")


# ------------------------------------------------------------------ 1. links into the remote's folder
@pytest.mark.parametrize("view", ["folder", "fuse"])
def test_a_mount_linked_into_the_remote_folder_is_refused(tmp_path: Path, view: str) -> None:
    _skip_without_fuse(view)
    remote = _dataset(tmp_path)
    (remote / "view").mkdir()
    link = tmp_path / "view"
    link.symlink_to(remote / "view", target_is_directory=True)
    code, out, started = _run_until(_sidecar(view, remote, tmp_path / "cache", link, tmp_path))
    assert not started and code == 2, out[-3000:]
    assert _last(out).startswith(f"epochfs sidecar: --mount: {link} (a symlink to {remote / 'view'}) is "
                                 f"inside the remote's folder {remote} "), out[-3000:]
    assert os.listdir(remote / "view") == [] and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("command", ["sample", "sidecar"])
def test_a_cache_linked_into_the_remote_folder_is_refused(tmp_path: Path, command: str) -> None:
    remote = _dataset(tmp_path)
    (remote / "cache").mkdir()
    link = tmp_path / "cache"
    link.symlink_to(remote / "cache", target_is_directory=True)
    argv = (["sample", "--remote", f"file://{remote}", "--cache", str(link), "--capacity", "1Mi"]
            if command == "sample" else _sidecar("folder", remote, link, tmp_path / "view", tmp_path))
    code, out, started = _run_until(argv)
    assert not started and code == 2, out[-3000:]
    assert _last(out).startswith(f"epochfs {command}: --cache: {link} (a symlink to {remote / 'cache'}) "
                                 f"is inside the remote's folder {remote} "), out[-3000:]
    assert os.listdir(remote / "cache") == []


# ------------------------------------------------------------------ 2. a link to the cache's tmp/
@pytest.mark.parametrize("command", ["publish", "sidecar-folder", "sidecar-fuse", "mount"])
def test_a_mount_linked_to_the_cache_tmp_is_refused(tmp_path: Path, command: str) -> None:
    """The publisher wrote into ``tmp/`` (removed at the next sampler start), a FUSE view mounted
    over it would make every download fail: refused as the direct path is, the link named."""
    _skip_without_fuse("fuse" if command in ("sidecar-fuse", "mount") else "folder")
    remote = _dataset(tmp_path)
    cache = tmp_path / "cache"
    Store(cache, create=True).close()
    before = sorted(os.listdir(cache / "tmp"))
    link = tmp_path / "view"
    link.symlink_to(cache / "tmp", target_is_directory=True)
    if command.startswith("sidecar-"):
        argv = _sidecar(command.removeprefix("sidecar-"), remote, cache, link, tmp_path)
    else:
        argv = [command, "--cache", str(cache), "--mount", str(link)]
    try:
        code, out, started = _run_until(argv)
    finally:  # a view mounted over tmp/ (the refusal missing) is taken off, its bind too
        for place, any_kind in ((cache / "tmp", False), (cache / "objects-ro", True)):
            if find_mount(place) is not None:
                lazy_unmount(place, any_kind=any_kind)
    assert not started and code == 2, out[-3000:]
    name = command.partition("-")[0]
    assert _last(out) == (f"epochfs {name}: --mount: {link} (a symlink to {cache / 'tmp'}) is inside the "
                          f"cache folder {cache} (--cache), which the store writes: mount the view beside "
                          f"the cache (--mount {tmp_path / 'view'})"), out[-3000:]
    assert sorted(os.listdir(cache / "tmp")) == before


# ------------------------------------------------------------------ 3. dangling links
@pytest.mark.parametrize("command", ["publish", "sidecar"])
def test_a_mount_linked_to_a_missing_folder_is_named(tmp_path: Path, command: str) -> None:
    remote = _dataset(tmp_path)
    cache = tmp_path / "cache"
    Store(cache, create=True).close()
    link = tmp_path / "view"
    link.symlink_to("missing/view", target_is_directory=True)  # relative: both spellings named
    argv = ([command, "--cache", str(cache), "--mount", str(link)] if command == "publish"
            else _sidecar("folder", remote, cache, link, tmp_path))
    code, out, started = _run_until(argv)
    assert not started and code == 2, out[-3000:]
    assert _last(out) == (f"epochfs {command}: --mount {link}: a symlink to a missing folder, "
                          f"{tmp_path / 'missing' / 'view'} (it points to missing/view): make that "
                          f"folder, or give the path of an existing one"), out[-3000:]
    assert not (tmp_path / "missing").exists() and link.is_symlink()


def test_a_cache_linked_to_a_missing_folder_is_named(tmp_path: Path) -> None:
    remote = _dataset(tmp_path)
    link = tmp_path / "cache"
    link.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    code, out, started = _run_until(["sample", "--remote", f"file://{remote}", "--cache", str(link),
                                     "--capacity", "1Mi"])
    assert not started and code == 2, out[-3000:]
    assert _last(out) == (f"epochfs sample: --cache {link}: a symlink to a missing folder, "
                          f"{tmp_path / 'elsewhere'}: make that folder, or give the path of an "
                          f"existing one"), out[-3000:]
    assert not (tmp_path / "elsewhere").exists()


# ------------------------------------------------------------------ 4. frozen and dead mounts
def _spelled_elsewhere(path: Path) -> str:
    """:func:`spelled` of ``path`` in a child process: one stuck on a frozen FUSE server is killed
    by the guard (and the test fails) instead of hanging the test process."""
    code = "import sys; from pathlib import Path; from epochfs.sidecar.store.placement import spelled; " \
           "print(spelled(Path(sys.argv[1])))"
    try:
        out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True,
                             timeout=GUARD, check=True)
    except subprocess.TimeoutExpired:
        pytest.fail(f"spelled({path}) asked the frozen FUSE server")
    return out.stdout.strip()


@NEEDS_FUSE
def test_a_link_to_a_frozen_or_dead_fuse_mount_is_spelled_without_asking_it(tmp_path: Path) -> None:
    """The mount table holds the link's folder: a link to a FUSE view is spelled as its mount
    point (its server frozen, then killed), and a server restarted at the link after SIGKILL finds
    the dead mount through it, cleans it and serves again."""
    cache = tmp_path / "cache"
    store = open_store(cache)
    admit(store, make_objects(3, 64))
    store.cut(0)
    store.close()
    mount = tmp_path / "view"
    link = tmp_path / "link"
    link.symlink_to(mount, target_is_directory=True)
    with mounted(cache, mount) as m:
        freeze(m.proc)
        try:
            assert _spelled_elsewhere(link) == str(mount)
            assert _spelled_elsewhere(mount) == str(mount)
        finally:
            m.proc.send_signal(signal.SIGCONT)
        m.proc.kill()
        m.proc.wait()
        assert _spelled_elsewhere(link) == str(mount)  # dead: every stat answers ENOTCONN
        with mounted(cache, link) as again:
            assert again.proc.poll() is None
            assert sorted(os.listdir(link / "epoch-0" / "train")) == ["00000.bin", "00001.bin", "00002.bin"]
