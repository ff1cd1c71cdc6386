"""The low-level adapter through real mounts: the kernel sees the inode numbers the view computes
(so libfuse keeps no node table), and both libfuse APIs show the same namespace with the same
errors, control files included."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from fuse_helpers import EPOCHFS, admit, make_objects, mounted, open_store

from epochfs.fuse.inodes import CONTROL_INO, LATEST_INO, MAX_EPOCH, ROOT_INO, STATUS_INO, Inodes
from epochfs.fuse.view import View

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]


def _store(cache: Path) -> None:
    store = open_store(cache)
    admit(store, {**make_objects(30, 500, prefix="train/cat/"),
                  **make_objects(7, 900, prefix="train/dog/", start=30),
                  **make_objects(2, 100, prefix="val/", start=40)})
    store.cut(0)
    store.close()


def _namespace(root: Path) -> dict[str, object]:
    """Everything a reader can see below ``root`` (no inode numbers: they are the API's own; no
    times outside the epoch, which are the server's start, nor status.json's changing body)."""
    out: dict[str, object] = {}
    for dirpath, dirs, files in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        st = os.stat(dirpath)
        when = st.st_mtime_ns if rel.startswith("epoch-") else None
        out[rel] = ("dir", st.st_mode, when, sorted(dirs), sorted(files))
        for name in files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if name == "status.json":
                out[f"{rel}/{name}"] = st.st_mode
                continue
            kind = os.readlink(p) if os.path.islink(p) else Path(p).read_bytes()
            out[f"{rel}/{name}"] = (st.st_mode, st.st_size, st.st_mtime_ns, kind)
    return out


def _errors(root: Path) -> dict[str, int | None]:
    f = root / "epoch-0" / "train" / "cat" / "00000.bin"
    tries: dict[str, Callable[[], object]] = {
        "missing": lambda: os.stat(root / "epoch-0" / "nope"),
        "missing epoch": lambda: os.stat(root / "epoch-0" / "train" / "cow" / "x"),
        "listdir of a file": lambda: os.listdir(f),
        "readlink of a folder": lambda: os.readlink(root / "epoch-0" / "train"),
        "write": lambda: os.open(root / ".epochfs" / "status.json", os.O_WRONLY),
        "create": lambda: os.open(root / "epoch-0" / "new", os.O_CREAT | os.O_WRONLY),
        "mkdir": lambda: os.mkdir(root / "epoch-0" / "d"),
        "unlink": lambda: os.unlink(f),
        "rename": lambda: os.rename(f, root / "epoch-0" / "x"),
        "symlink": lambda: os.symlink("x", root / "epoch-0" / "s"),
        "setxattr": lambda: os.setxattr(root / "epoch-0", "user.x", b"1"),
        "chmod": lambda: os.chmod(root / "epoch-0", 0o777),
    }
    out: dict[str, int | None] = {}
    for what, call in tries.items():
        try:
            call()
            out[what] = None
        except OSError as e:
            out[what] = e.errno
    return out


def test_the_kernel_sees_the_inode_numbers_the_view_computes(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _store(cache)
    with mounted(cache, tmp_path / "mnt") as m:
        store = open_store(cache)
        inodes = Inodes(View(store=store, link_root=cache / "objects"))
        for rel, want in (("", ROOT_INO), (".epochfs", CONTROL_INO), ("latest", LATEST_INO),
                          (".epochfs/status.json", STATUS_INO)):
            assert os.lstat(m.path / rel).st_ino == want, rel
        walked = 0
        for dirpath, dirs, files in os.walk(m.path / "epoch-0"):
            with os.scandir(dirpath) as it:  # readdir-plus: the numbers handed out with the listing
                listed = {e.name: e.inode() for e in it}
            for name in dirs + files:
                path = "/" + os.path.relpath(os.path.join(dirpath, name), m.path)
                want = inodes.ino(path)
                assert listed[name] == want == os.lstat(os.path.join(dirpath, name)).st_ino, path
                walked += 1
        assert walked == 39 + 4  # the files and train, cat, dog, val
        store.close()
    assert "low-level API" in m.log_text()


def test_both_apis_show_the_same_namespace_and_errors(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _store(cache)
    seen = {}
    for api in ("lowlevel", "highlevel"):
        with mounted(cache, tmp_path / f"mnt-{api}", args=("--fuse-api", api)) as m:
            names = _namespace(m.path)
            status = json.loads((m.path / ".epochfs" / "status.json").read_text())
            manifest = (m.path / ".epochfs" / "epoch-0.manifest").read_bytes()
            seen[api] = (names, status["samples"], status["latest_epoch"], manifest, _errors(m.path),
                         os.statvfs(m.path).f_blocks)
        assert m.proc.returncode == 0
        assert f"{'low' if api == 'lowlevel' else 'high'}-level API" in m.log_text()
    assert seen["lowlevel"] == seen["highlevel"]
    names, samples, latest, manifest, errors, blocks = seen["lowlevel"]
    assert samples == 39 and latest == 0 and manifest.startswith(b"#epochfs") and blocks > 0
    assert len([k for k in names if k.startswith("epoch-0/") and "/" in k[8:]]) > 39
    assert errors["missing"] == errors["missing epoch"] == errno.ENOENT
    assert errors["listdir of a file"] == errno.ENOTDIR
    assert errors["readlink of a folder"] == errno.EINVAL
    assert {errors[k] for k in ("write", "create", "mkdir", "unlink", "rename", "symlink", "setxattr",
                                "chmod")} == {errno.EROFS}


def test_an_unknown_fuse_api_is_refused_before_mounting(tmp_path: Path) -> None:
    out = subprocess.run([*EPOCHFS, "mount", "--cache", str(tmp_path / "c"), "--mount", str(tmp_path / "m"),
                          "--fuse-api", "midlevel"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "--fuse-api" in out.stderr and "lowlevel, highlevel" in out.stderr
    assert not (tmp_path / "m").exists()


def test_an_epoch_past_the_inode_numbers_is_refused_and_a_cache_holding_one_recovers(
        tmp_path: Path) -> None:
    """The store refuses a cut above ``MAX_EPOCH`` (the view has no inode numbers past it), and
    one more than MAX_JUMP above the next epoch unless an operator asks (``far``). A cache cut
    that far before the limit was enforced (the epoch row and ``epochs.hwm`` above it: every
    later cut was refused, the view showed nothing new) recovers at the sampler's next start."""
    import sqlite3

    from epochfs.sidecar.store import HWM_NAME, MAX_JUMP

    cache = tmp_path / "cache"
    _store(cache)
    store = open_store(cache)
    huge = MAX_EPOCH + 5
    with pytest.raises(ValueError, match="above the largest epoch number 536,870,910"):
        store.cut(huge, force=True)
    with pytest.raises(ValueError, match="a jump of more than 1,000 epochs is refused"):
        store.cut(2 + MAX_JUMP, force=True)
    assert store.cut(1 + MAX_JUMP, force=True) == 1 + MAX_JUMP  # at the limit: a jump
    assert store.cut(MAX_EPOCH, force=True, far=True) == MAX_EPOCH  # an operator's far jump
    store.close()
    # What an older epochfs left: an epoch above the limit, in the index and the high-water mark.
    with sqlite3.connect(cache / "index.sqlite") as db:
        db.execute("INSERT INTO epochs(n, cut_at, samples, bytes, new, evicted, max_sample, last_read, "
                   "first_sample) SELECT ?, cut_at, samples, bytes, 0, 0, max_sample, last_read, "
                   "first_sample FROM epochs WHERE n=0", (huge,))
    (cache / HWM_NAME).write_text(f"{huge} {huge}\n")
    store = open_store(cache)
    store.recover(integrity="ok")
    assert [e.epoch for e in store.epochs()] == [0, 1 + MAX_JUMP, MAX_EPOCH]
    store.close()
    with mounted(cache, tmp_path / "mnt") as m:
        names = os.listdir(m.path)
        assert {"epoch-0", f"epoch-{1 + MAX_JUMP}", f"epoch-{MAX_EPOCH}"} <= set(names)
        assert f"epoch-{huge}" not in names
        assert sorted(os.listdir(m.path / "epoch-0")) == ["train", "val"]
