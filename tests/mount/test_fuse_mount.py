"""Real mounts: ``epochfs mount`` over a cache filled through the Store API, read as a user would."""

from __future__ import annotations

import errno
import glob
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from common import wait_until
from fuse_helpers import EPOCHFS, admit, files_under, freeze, make_objects, mounted, open_store, stop

from epochfs.fuse.mounting import find_mount, is_dead
from epochfs.sidecar.store.epochpins import RETIRE_GRACE

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]


def read_manifest(path: Path) -> tuple[str, list[tuple[str, int, str]]]:
    lines = path.read_text().splitlines()
    return lines[0], [(a, int(b), c) for a, b, c in (line.split("\t") for line in lines[1:])]


def last_read(cache: Path, n: int) -> float:
    db = sqlite3.connect(f"file:{cache / 'index.sqlite'}?mode=ro", uri=True)
    try:
        return float(db.execute("SELECT last_read FROM epochs WHERE n=?", (n,)).fetchone()[0])
    finally:
        db.close()


def test_every_byte_growth_and_latest(tmp_path: Path) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache)
    first = make_objects(20, 4096, seed=1)
    admit(store, first)
    store.cut(0)
    with mounted(cache, mnt) as m:
        assert os.readlink(m.path / "latest") == "epoch-0"
        assert files_under(m.path / "epoch-0") == first
        more = make_objects(15, 70_000, start=20, seed=2)
        admit(store, more)
        # A lookup of the next epoch cuts it at once (the condition holds).
        got = files_under(m.path / "epoch-1")
        assert got == first | more
        wait_until(lambda: os.readlink(m.path / "latest") == "epoch-1", timeout=10, what="latest")
        assert sorted(os.listdir(m.path)) == [".epochfs", "epoch-0", "epoch-1", "latest"]
        assert files_under(m.path / "latest") == first | more
        assert files_under(m.path / "epoch-0") == first  # immutable
    assert m.proc.returncode == 0
    store.close()


def test_cut_on_lookup_waits_for_condition_and_is_not_cached(tmp_path: Path) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache, min_samples=5)
    admit(store, make_objects(3, 100))
    with mounted(cache, mnt) as m:
        for _ in range(3):  # repeated lookups: each asks again (negative entries are not cached)
            assert not os.path.exists(m.path / "epoch-0")
        assert [n for n, _ in store.pending_cuts()] == [0]
        assert "epoch-0" not in os.listdir(m.path)
        admit(store, make_objects(2, 100, start=3))
        t0 = time.monotonic()
        assert os.path.isdir(m.path / "epoch-0")  # the same lookup now succeeds at once
        assert time.monotonic() - t0 < 2
        assert len(os.listdir(m.path / "epoch-0" / "train")) == 5
    assert m.proc.returncode == 0
    store.close()


def test_queued_cut_appears_when_sampler_cuts(tmp_path: Path) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache, min_samples=4)
    admit(store, make_objects(1, 100))
    with mounted(cache, mnt) as m:
        assert not os.path.exists(m.path / "epoch-0")
        admit(store, make_objects(3, 100, start=1))
        assert store.process_cut_requests()[0][0] == 0  # what the sampler does after admitting
        wait_until(lambda: "epoch-0" in os.listdir(m.path), timeout=10, what="epoch-0 listed")
        assert os.readlink(m.path / "latest") == "epoch-0"
        assert len(os.listdir(m.path / "epoch-0" / "train")) == 4
    store.close()


def test_stray_lookups_far_ahead_cut_nothing(tmp_path: Path) -> None:
    """`stat epoch-999999` from a monitoring script, thousands of times from several threads, before
    and after epoch 0: no cut, no queued request, and the trainer's epochs still come in order."""
    import concurrent.futures

    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache, min_samples=1)
    admit(store, make_objects(2, 100))

    def storm(start: int) -> int:
        return sum(os.path.exists(mnt / f"epoch-{start + 7 * i}") for i in range(500))

    with mounted(cache, mnt) as m, concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert sum(pool.map(storm, (999_999, 2, 10**17, 50))) == 0
        assert store.stats().cuts_total == 0 and store.pending_cuts() == []
        assert os.path.isdir(m.path / "epoch-0")
        assert sum(pool.map(storm, (999_999, 2, 10**17, 50))) == 0
        assert os.path.isdir(m.path / "epoch-1")
        assert [e.epoch for e in store.epochs()] == [0, 1] and store.stats().cuts_total == 2
    store.close()


def test_every_write_call_is_erofs_even_for_root(tmp_path: Path) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache)
    objs = make_objects(3, 1000)
    admit(store, objs)
    store.cut(0)
    with mounted(cache, mnt) as m:
        e0 = m.path / "epoch-0"
        f = e0 / "train" / "00000.bin"
        target = Path(os.readlink(f))
        status = m.path / ".epochfs" / "status.json"
        assert os.geteuid() == 0
        attempts = {
            "open for write via symlink": lambda: os.open(f, os.O_WRONLY),
            "open rw via symlink": lambda: os.open(f, os.O_RDWR),
            "append via symlink": lambda: os.open(f, os.O_WRONLY | os.O_APPEND),
            "write to object through link root": lambda: os.open(target, os.O_WRONLY),
            "create": lambda: os.open(e0 / "new.bin", os.O_WRONLY | os.O_CREAT, 0o644),
            "create at root": lambda: os.open(m.path / "new", os.O_WRONLY | os.O_CREAT, 0o644),
            "open status for write": lambda: os.open(status, os.O_WRONLY),
            "mkdir": lambda: os.mkdir(e0 / "d"),
            "mknod": lambda: os.mknod(e0 / "fifo", 0o600 | 0o010000),
            "unlink": lambda: os.unlink(f),
            "unlink object": lambda: os.unlink(target),
            "rmdir": lambda: os.rmdir(e0 / "train"),
            "rename": lambda: os.rename(f, e0 / "train" / "x.bin"),
            "rename epoch": lambda: os.rename(e0, m.path / "epoch-9"),
            "link": lambda: os.link(f, e0 / "hard", follow_symlinks=False),
            "symlink": lambda: os.symlink("/etc/passwd", e0 / "s"),
            "chmod via symlink": lambda: os.chmod(f, 0o777),
            "chmod dir": lambda: os.chmod(e0, 0o777),
            "chown": lambda: os.chown(f, 1, 1),
            "lchown": lambda: os.lchown(f, 1, 1),
            "truncate via symlink": lambda: os.truncate(f, 0),
            "truncate status": lambda: os.truncate(status, 0),
            "utime via symlink": lambda: os.utime(f, (1, 1)),
            "utime no-follow": lambda: os.utime(f, (1, 1), follow_symlinks=False),
            "utime dir": lambda: os.utime(e0, (1, 1)),
            "setxattr": lambda: os.setxattr(e0, "user.x", b"1"),
            "setxattr via symlink": lambda: os.setxattr(f, "user.x", b"1"),
            "removexattr": lambda: os.removexattr(e0, "user.x"),
        }
        for what, call in attempts.items():
            with pytest.raises(OSError) as e:
                call()
            assert e.value.errno == errno.EROFS, f"{what}: {e.value!r}"
        assert files_under(e0) == objs
    store.close()


def test_unknown_paths_are_enoent(tmp_path: Path) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache)
    admit(store, make_objects(2, 10))
    store.cut(0)
    with mounted(cache, mnt) as m:
        for rel in ("nope", "epoch-00", "epoch-x", "epoch--1", "epoch-0/nope", "epoch-0/train/zz",
                    ".epochfs/nope", ".epochfs/epoch-9.manifest", ".epochfs/epoch-0.manifest/x"):
            with pytest.raises(OSError) as e:
                os.stat(m.path / rel)
            assert e.value.errno in (errno.ENOENT, errno.ENOTDIR), rel
        with pytest.raises(FileNotFoundError):
            (m.path / "epoch-0" / "missing.bin").read_bytes()
    store.close()


def test_manifest_matches_folder_and_tools_behave(tmp_path: Path) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache)
    arrays = {f"arrays/{i:03d}.npy": np.arange(i * 10, dtype=np.float32).reshape(-1) for i in range(1, 8)}
    objs = {}
    for key, arr in arrays.items():
        p = tmp_path / "tmp.npy"
        np.save(p, arr)
        objs[key] = p.read_bytes()
    objs |= make_objects(5, 333, prefix="deep/a/b/")
    admit(store, objs)
    store.cut(0)
    with mounted(cache, mnt) as m:
        e0 = m.path / "epoch-0"
        header, rows = read_manifest(m.path / ".epochfs" / "epoch-0.manifest")
        total = sum(map(len, objs.values()))
        assert header == f"#epochfs-manifest v1\tepoch=0\tfiles={len(objs)}\tbytes={total}"
        assert [r[0] for r in rows] == sorted(objs)
        walked = sorted(str((Path(d) / n).relative_to(e0)) for d, _, ns in os.walk(e0) for n in ns)
        assert walked == [r[0] for r in rows]
        for path, size, checksum in rows:
            assert os.path.getsize(e0 / path) == size
            assert checksum == "md5:" + hashlib.md5((e0 / path).read_bytes()).hexdigest()
        assert sorted(glob.glob(str(e0 / "arrays" / "*.npy"))) == [str(e0 / k) for k in sorted(arrays)]
        assert sorted(glob.glob(str(e0 / "**" / "*.bin"), recursive=True)) == sorted(
            str(e0 / k) for k in objs if k.endswith(".bin"))
        for key, arr in arrays.items():
            np.testing.assert_array_equal(np.load(e0 / key), arr)
            mm = np.load(e0 / key, mmap_mode="r")
            np.testing.assert_array_equal(mm, arr)
            del mm
        st = os.stat(m.path / ".epochfs" / "status.json")
        doc = json.loads((m.path / ".epochfs" / "status.json").read_text())
        assert doc["samples"] == len(objs) and doc["latest_epoch"] == 0
        assert st.st_mode & 0o777 == 0o444
        assert os.statvfs(m.path).f_blocks > 0
    store.close()


def test_status_json_changes_while_mounted(tmp_path: Path) -> None:
    cache, mnt = tmp_path / "ca,che dir", tmp_path / "mnt"  # a comma must not break mount options
    store = open_store(cache)
    admit(store, make_objects(2, 10))
    with mounted(cache, mnt) as m:
        status = m.path / ".epochfs" / "status.json"
        assert json.loads(status.read_text())["samples"] == 2
        admit(store, make_objects(5, 10, start=2))
        assert json.loads(status.read_text())["samples"] == 7  # fresh per open (direct I/O)
        wait_until(lambda: os.path.getsize(status) == len(status.read_bytes()), timeout=10,
                   what="status.json size to follow its content")
    store.close()


def test_retired_epochs_vanish(tmp_path: Path) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache, keep_epochs=1, in_use_seconds=300)
    admit(store, make_objects(3, 100))
    store.cut(0)
    with mounted(cache, mnt) as m:
        listed = sorted(os.listdir(m.path / "epoch-0" / "train"))  # kernel now caches these entries
        assert len(listed) == 3
        assert (m.path / ".epochfs" / "epoch-0.manifest").exists()
        admit(store, make_objects(2, 100, start=3))
        store.cut(1)
        assert store.retire(now=time.time() + 10_000) == [0]  # as the sampler's eviction would
        wait_until(lambda: not os.path.exists(m.path / "epoch-0"), timeout=10, what="epoch-0 gone")
        assert "epoch-0" not in os.listdir(m.path)
        assert not os.path.exists(m.path / "epoch-0" / "train" / listed[0])
        assert not (m.path / ".epochfs" / "epoch-0.manifest").exists()
        assert os.readlink(m.path / "latest") == "epoch-1"
        assert not os.path.exists(m.path / "epoch-0")  # and a lookup does not bring it back
    store.close()


def test_lookups_record_reads_so_the_epoch_stays_pinned(tmp_path: Path) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache, keep_epochs=1)
    admit(store, make_objects(3, 100))
    store.cut(0)
    assert last_read(cache, 0) == 0.0
    with mounted(cache, mnt) as m:
        os.listdir(m.path / "epoch-0" / "train")
        wait_until(lambda: last_read(cache, 0) > 0, timeout=10, what="read recorded")
        admit(store, make_objects(1, 100, start=3))
        store.cut(1)
        assert store.retire() == []  # epoch 0 is in use, so it stays although not the newest
        assert os.path.isdir(m.path / "epoch-0")
    store.close()


READER = r"""
import hashlib, os, sys, time
root, seconds = sys.argv[1], float(sys.argv[2])
with open(os.path.join(root, ".epochfs", "epoch-0.manifest")) as f:
    rows = [line.split("\t") for line in f.read().splitlines()[1:]]
deadline, reads, bad = time.monotonic() + seconds, 0, 0
while time.monotonic() < deadline:
    for path, size, checksum in rows:
        with open(os.path.join(root, "epoch-0", path), "rb") as f:
            data = f.read()
        reads += 1
        if len(data) != int(size) or "md5:" + hashlib.md5(data).hexdigest() != checksum:
            bad += 1
            print("BAD", path, file=sys.stderr)
print(reads, bad)
"""

WRITER = r"""
import sys, time
sys.path.insert(0, sys.argv[3])
from fuse_helpers import admit, make_objects
from epochfs.sidecar.store import Store
store = Store(sys.argv[1])
deadline, i, admitted, cuts = time.monotonic() + float(sys.argv[2]), 1000, 0, 0
while time.monotonic() < deadline:
    try:
        admit(store, make_objects(1, 65536, start=i, seed=9))
        admitted += 1
        i += 1
        if admitted % 4:
            continue
    except RuntimeError:
        pass  # backpressure: the cut below lets older samples fall out of the newest epoch
    store.cut()
    cuts += 1
print(admitted, cuts, store.stats().evicted_total)
"""


@pytest.mark.long
def test_readers_under_eviction_pressure(tmp_path: Path) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    size, count = 65536, 24
    # Half the capacity is headroom: epoch 0 (24) + the newest epoch (32) leave samples to evict.
    store = open_store(cache, capacity=64 * size, keep_epochs=1, headroom=0.5)
    admit(store, make_objects(count, size, seed=3))
    store.cut(0)
    with mounted(cache, mnt) as m:
        os.listdir(m.path / "epoch-0")  # a reader's first lookup pins epoch 0 (recorded async)
        wait_until(lambda: last_read(cache, 0) > 0, timeout=10, what="epoch 0 in use")
        seconds = str(4 + RETIRE_GRACE)  # retired epochs' samples go once their grace is over
        readers = [subprocess.Popen([sys.executable, "-c", READER, str(m.path), seconds],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for _ in range(4)]
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(cache), seconds,
                                   str(Path(__file__).resolve().parents[1])],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        w_out, w_err = writer.communicate(timeout=60)
        assert writer.returncode == 0, w_err
        admitted, cuts, evicted = map(int, w_out.split())
        for r in readers:
            out, err = r.communicate(timeout=60)
            assert r.returncode == 0, err
            reads, bad = map(int, out.split())
            assert bad == 0, err
            assert reads >= count
        assert evicted > 0 and cuts > 0 and admitted > count  # there was real pressure
        assert os.path.isdir(m.path / "epoch-0")
    store.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_exits_zero_and_leaves_nothing(tmp_path: Path, sig: int) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache)
    admit(store, make_objects(2, 10))
    store.cut(0)
    with mounted(cache, mnt) as m:
        fd = os.open(m.path / "epoch-0", os.O_RDONLY)  # busy mount: the unmount must be lazy
        try:
            assert stop(m, sig=sig) == 0
        finally:
            os.close(fd)
        assert find_mount(mnt) is None
        assert find_mount(cache / "objects-ro") is None
    store.close()
    with open_store(cache) as again:
        assert [e.epoch for e in again.epochs()] == [0]


def epochfs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*EPOCHFS, *args], capture_output=True, text=True, timeout=60)


def test_bad_mount_points_exit_2(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    open_store(cache).close()
    r = epochfs("mount", "--cache", str(cache), "--mount", str(tmp_path / "missing" / "view"))
    assert r.returncode == 2 and "--mount" in r.stderr and "does not exist" in r.stderr
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    r = epochfs("mount", "--cache", str(cache), "--mount", str(full))
    assert r.returncode == 2 and "not empty" in r.stderr
    with mounted(cache, tmp_path / "mnt") as m:
        r = epochfs("mount", "--cache", str(cache), "--mount", str(m.path))
        assert r.returncode == 2 and "already a mount point" in r.stderr
    assert not (tmp_path / "missing").exists()
    # Where the epochs' symlinks point: mounted there, the view would shadow every file it names.
    for inside in (cache / "objects-ro", cache / "objects" / "view", tmp_path / "links" / "view"):
        args = ["--link-root", str(tmp_path / "links")] if "links" in str(inside) else []
        r = epochfs("mount", "--cache", str(cache), "--mount", str(inside), *args)
        assert r.returncode == 2 and "where the epochs' files point" in r.stderr, (inside, r.stderr)
        assert find_mount(inside) is None and find_mount(cache / "objects-ro") is None, inside


def test_dead_mount_is_cleaned_and_remounted(tmp_path: Path) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache)
    objs = make_objects(3, 500)
    admit(store, objs)
    store.cut(0)
    with mounted(cache, mnt) as m:
        m.proc.kill()
        m.proc.wait()
        assert is_dead(mnt)
        with mounted(cache, mnt) as again:  # finds the dead mount, unmounts it, mounts anew
            # wait_for_mount can take the moment between the dead mount's detach and the new mount
            # for a live mount (its statvfs lands on the bare folder): wait for the new server's own
            # word that it is mounted.
            wait_until(lambda: "mounted: entry/attr timeout" in again.log_text(), timeout=20,
                       what="the new server mounted")
            assert files_under(again.path / "epoch-0") == objs
            again.proc.kill()
            again.proc.wait()
            assert is_dead(mnt)
            r = epochfs("unmount", "--mount", str(mnt))
            assert r.returncode == 0, r.stderr
            assert find_mount(mnt) is None
            assert not is_dead(mnt)
    store.close()


def served_calls(m) -> dict[str, int]:
    import ast
    import re

    found = re.search(r"calls served: (\{.*\})", m.log_text())
    assert found, m.log_text()[-2000:]
    return dict(ast.literal_eval(found.group(1)))


@pytest.mark.parametrize("warm", [True, False])
def test_kernel_caches_symlinks_one_readlink_per_file(tmp_path: Path, warm: bool) -> None:
    """Reading every file twice costs one readlink per file and no per-file lookup (readdir-plus)."""
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache)
    objs = make_objects(300, 64)
    admit(store, objs)
    store.cut(0)
    env = {} if warm else {"EPOCHFS_WARM_FILES": "0"}
    with mounted(cache, mnt, env=env) as m:
        assert os.path.isdir(m.path / "epoch-0")
        if warm:
            wait_until(lambda: "warmed 300 symlink(s) of epoch 0" in m.log_text(), timeout=20,
                       what="warm-up of epoch 0")
        for _ in range(2):
            assert files_under(m.path / "epoch-0") == objs
        assert stop(m) == 0
    calls = served_calls(m)
    assert calls["readlink"] == len(objs), calls
    assert calls.get("getattr", 0) < 20, calls  # epoch and folder lookups only, none per file
    store.close()


def test_link_root_flag(tmp_path: Path) -> None:
    from epochfs.fuse.mounting import lazy_unmount, make_readonly_bind

    cache, mnt, ro = tmp_path / "cache", tmp_path / "mnt", tmp_path / "ro"
    store = open_store(cache)
    objs = make_objects(4, 100)
    admit(store, objs)
    store.cut(0)
    mnt.mkdir()
    r = epochfs("mount", "--cache", str(cache), "--mount", str(mnt), "--link-root", "relative/ro")
    assert r.returncode == 2 and "--link-root" in r.stderr
    assert make_readonly_bind(cache / "objects", ro)
    try:
        with mounted(cache, mnt, args=("--link-root", str(ro))) as m:
            link = os.readlink(m.path / "epoch-0" / "train" / "00000.bin")
            assert link.startswith(f"{ro}/")
            assert files_under(m.path / "epoch-0") == objs
            assert find_mount(cache / "objects-ro") is None  # no bind of its own
        assert find_mount(ro) is not None  # the server leaves a bind it did not make
    finally:
        lazy_unmount(ro, any_kind=True)
    store.close()


def test_a_mount_that_does_not_answer_counts_as_dead(tmp_path: Path) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    open_store(cache).close()
    with mounted(cache, mnt) as m:
        assert not is_dead(mnt)
        # A wedged server: requests wait, nothing fails. freeze() waits until every thread has
        # stopped; right after kill() an idle worker could still answer the probe's statfs.
        freeze(m.proc)
        try:
            t0 = time.monotonic()
            assert is_dead(mnt, timeout=1.0)
            assert time.monotonic() - t0 < 5
        finally:
            m.proc.send_signal(signal.SIGCONT)
        assert not is_dead(mnt)
        # Stopped and continued, the server still stops on SIGTERM (its signal thread once took
        # the wait's empty answer after SIGCONT for a signal and ignored the real one).
        m.proc.send_signal(signal.SIGTERM)
        assert m.proc.wait(timeout=10) == 0, m.log_text()[-3000:]


def test_mount_inside_the_cache_refused(tmp_path: Path) -> None:
    """A view mounted inside the cache folder hides the store's own folders: over ``tmp/`` every
    download failed (read-only file system) and the sampler crashed at every start. Refused, as
    the cache folder itself is, before anything is mounted."""
    cache = tmp_path / "cache"
    open_store(cache).close()
    for inside in (cache / "tmp", cache / "epochs", cache / "view", cache / "tmp" / "deeper"):
        try:
            r = epochfs("mount", "--cache", str(cache), "--mount", str(inside))
        except subprocess.TimeoutExpired:  # mounted and serving: the refusal is missing
            r = subprocess.CompletedProcess([], -1, "", "still serving")
        try:
            assert r.returncode == 2 and "is inside the cache folder" in r.stderr, (inside, r.stderr)
            assert find_mount(inside) is None, inside
        finally:
            for left in (inside, cache / "objects-ro"):
                if find_mount(left) is not None:
                    subprocess.run(["umount", "-l", str(left)], check=False)
