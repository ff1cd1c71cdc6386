"""``epochfs sidecar --view folder`` for real, with no capability and no_new_privs:
epochs published from a ``file://`` remote, byte-exact; cuts by a request on the loopback port (as
the torch client asks), by ``epochfs cut`` and by the interval; reads reported in use recorded; a
publisher stalled until the store retired an epoch the folder still lists, then killed with -9,
restarted while readers keep reading (a failure only counts in an epoch the store still holds);
SIGTERM exits 0 and leaves the folder.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from common import random_objects, wait_until
from folderview_helpers import (
    cli,
    cut,
    folder_sidecar,
    kill_child,
    last_read,
    owned_dir,
    proc_status,
    process_tree,
    write_remote,
)

from epochfs.torchclient import epochwalk, layout

pytestmark = pytest.mark.skipif(os.geteuid() == 0 and not os.path.exists("/usr/bin/setpriv"),
                                reason="needs setpriv to drop root")


def link_of(path: Path) -> str | None:
    """The link's target, None while it is not there yet (latest follows the epoch it names)."""
    try:
        return os.readlink(path)
    except FileNotFoundError:
        return None


def check_epoch(folder: Path, n: int, objects: dict[str, bytes]) -> list[str]:
    manifest = layout.read_manifest(folder, n)
    assert manifest is not None, f"epoch-{n} has no manifest"
    assert manifest.paths, f"epoch-{n} is empty"
    for rel in manifest.paths:
        assert (folder / f"epoch-{n}" / rel).read_bytes() == objects[rel], rel
    assert [p for p, _ in epochwalk.walk_epoch(folder, n)] == manifest.paths
    return manifest.paths


def live_in_store(cache: Path, n: int) -> bool:
    """Epoch ``n`` is live in the store (not retired). Retirement is final, so an epoch live after a
    read failed was live throughout the read: the one case the contract forbids a failure in."""
    db = sqlite3.connect(f"file:{cache / 'index.sqlite'}?mode=ro", uri=True, timeout=30)
    try:
        row = db.execute("SELECT retired FROM epochs WHERE n=?", (n,)).fetchone()
        return row is not None and not int(row[0])
    finally:
        db.close()


@pytest.fixture
def remote() -> tuple[Path, dict[str, bytes]]:
    with owned_dir() as base:
        objects = random_objects(40, 8192, seed=3)
        write_remote(base, objects)
        yield base, objects


def test_unprivileged_sidecar_publishes_epochs_byte_exact(remote: tuple[Path, dict[str, bytes]]) -> None:
    root, objects = remote
    with owned_dir() as base, folder_sidecar(base, root, extra=("--min-samples", "10")) as car:
        # No process of the sidecar holds a privilege: no capability at all, no_new_privs.
        tree = process_tree(car.proc.pid)
        assert len(tree) >= 3, tree  # supervisor, sampler, publisher
        for pid in tree:
            st = proc_status(pid)
            assert st["CapEff"] == st["CapPrm"] == "0" * 16, (pid, st)
            if os.geteuid() == 0:
                assert st["CapBnd"] == "0" * 16 and st["NoNewPrivs"] == "1", (pid, st)
        health = car.health()
        assert health["code"] == 200 and set(health["children"]) == {"sampler", "publisher"}, health
        assert car.metric("epochfs_mounted") == 1
        # Epoch 0 as the torch client asks for it: a cut request on the loopback port.
        assert cut(car, "epoch=1")[0] == 409  # only the next epoch, unless a jump is asked for
        start = time.monotonic()
        code, doc = cut(car, "epoch=0")
        took = time.monotonic() - start
        assert (code, doc["state"]) == (200, "live"), doc
        # Cut at once by the request, in the supervisor: observed in the histogram the sampler's
        # queued cuts go to (its count is the cuts asked for, issue 23), as the request's own time.
        assert car.metric("epochfs_cut_wait_seconds_count") == 1
        assert 0 <= (car.metric("epochfs_cut_wait_seconds_sum") or 0) <= took
        wait_until(lambda: layout.epoch_exists(car.mount, 0), timeout=10, what="epoch-0 published")
        first = check_epoch(car.mount, 0, objects)
        assert len(first) >= 10
        # latest moves right after the epoch appears (it never points at a missing one).
        wait_until(lambda: link_of(car.mount / "latest") == "epoch-0", timeout=10, what="latest")
        wait_until(lambda: (layout.read_status(car.mount) or {}).get("samples") == len(objects),
                   timeout=60, what="every object sampled")
        assert cli("cut", "--cache", str(car.cache)).stdout.strip() == "1"  # the CLI still cuts
        wait_until(lambda: layout.epoch_exists(car.mount, 1), timeout=10, what="epoch-1 published")
        assert sorted(check_epoch(car.mount, 1, objects)) == sorted(objects)
        assert layout.list_epochs(car.mount) == [0, 1]
        wait_until(lambda: link_of(car.mount / "latest") == "epoch-1", timeout=10, what="latest")
        # The torch client's report names the epoch it reads: the sidecar records a read of it.
        before = last_read(car.cache, 0)
        report = urllib.request.Request(f"{car.base}/v1/client-report?epoch=0", method="POST",
                                        data=b'{"samples": 1, "bytes": 8192, "wait_seconds": 0}')
        with urllib.request.urlopen(report, timeout=10) as r:
            assert r.status == 204
        wait_until(lambda: last_read(car.cache, 0) > before, timeout=10, what="the read recorded")
    # SIGTERM: exit 0 (checked by the helper); the folder stays as published for readers.
    assert car.exit_code == 0


def test_cut_interval_publishes_and_a_killed_publisher_is_replaced_while_readers_read(
        remote: tuple[Path, dict[str, bytes]]) -> None:
    root, objects = remote
    # Slow sampling (about 4 samples a second), so every interval brings new samples to cut, and a
    # short in-use window and a small cache, so epochs also retire (and objects go) while they read.
    extra = ("--cut-interval", "0.5", "--max-rate", "32Ki", "--in-use-seconds", "2", "--capacity", "160Ki")
    with owned_dir() as base:
        with folder_sidecar(base, root, extra=extra) as car:
            wait_until(lambda: len(layout.list_epochs(car.mount)) >= 2, timeout=30, what="two interval cuts")
            errors: list[str] = []
            read: list[int] = []
            stop = threading.Event()

            def reader() -> None:
                # A reader that reports nothing (a plain script): the store may retire the epoch it
                # reads (2 s after it appeared, once two newer ones are cut) and evict its objects.
                # The folder follows within 0.1 s, but not while the publisher is dead: with it
                # killed and restarting (0.5 s backoff, a Python start, recovery: seconds at a
                # high load) a listed epoch can be retired with its files gone. So a failure is
                # an error only while the store still holds the epoch: a visible file of a live
                # epoch is always readable (docs/folderview.md, "Retirement").
                while not stop.is_set():
                    for n in layout.list_epochs(car.mount)[-1:]:
                        try:
                            check_epoch(car.mount, n, objects)
                            read.append(n)
                        except (OSError, AssertionError) as e:
                            if live_in_store(car.cache, n):
                                errors.append(f"epoch-{n} (live) unreadable: {e!r}")

            t = threading.Thread(target=reader)
            t.start()
            try:
                # The publisher stalls first (as on a loaded node: the race this test once lost by
                # chance), until the store has retired an epoch the folder still lists; then -9.
                stalled = car.child_pid("publisher")
                assert stalled is not None, car.health()
                os.kill(stalled, signal.SIGSTOP)
                try:
                    listed = max(layout.list_epochs(car.mount))
                    wait_until(lambda: not live_in_store(car.cache, listed), timeout=30,
                               what="the store retires an epoch the folder lists")
                finally:
                    old = kill_child(car, "publisher")
                assert old == stalled
                wait_until(lambda: car.child_pid("publisher") not in (None, old), timeout=15,
                           what="the publisher restarted")
                # The restarted publisher's recovery may have removed every listed epoch (retired
                # while it was dead) before it publishes the live ones: the folder can be empty.
                newest = max(layout.list_epochs(car.mount), default=-1)
                wait_until(lambda: max(layout.list_epochs(car.mount), default=-1) > newest, timeout=15,
                           what="publishing goes on after the restart")
                done = len(read)
                wait_until(lambda: len(read) > done, timeout=15, what="a whole epoch read after the restart")
            finally:
                stop.set()
                t.join()
            assert not errors, errors[:5]
            assert car.health()["children"]["publisher"]["restarts"] == 1
            wait_until(lambda: min(layout.list_epochs(car.mount)) > 0, timeout=15, what="a retirement")
        # A SIGTERM lets a build in progress finish: nothing temporary is left behind.
        assert not [n for n in os.listdir(car.mount) if n.startswith(".epochfs-")]
        assert not [n for n in os.listdir(car.mount / ".epochfs") if n.startswith(".tmp-")]


def test_a_file_where_the_folder_goes_exits_2() -> None:
    with owned_dir() as base:
        (base / "shared").mkdir()
        (base / "shared" / "view").write_text("not a folder")
        (base / "remote").mkdir()  # apart from the cache: a cache inside the remote is refused first
        with folder_sidecar(base, base / "remote", ready=False, expect_exit=2) as car:
            car.proc.wait(timeout=30)
        assert "--mount" in car.log_text() and "not a folder" in car.log_text()


def test_the_view_setting_flag_environment_default_and_a_bad_value() -> None:
    from epochfs.sidecar import config

    base = ["--remote", "file:///data", "--cache", "/c", "--mount", "/m"]
    assert config.parse(config.SidecarSettings, base, environ={}).view == "fuse"
    assert config.parse(config.SidecarSettings, base, environ={"EPOCHFS_VIEW": "folder"}).view == "folder"
    assert config.parse(config.SidecarSettings, [*base, "--view", "FUSE"],
                        environ={"EPOCHFS_VIEW": "folder"}).view == "fuse"
    with pytest.raises(config.ConfigError,
                       match=r"--view \(from EPOCHFS_VIEW\): must be one of fuse, folder"):
        config.parse(config.SidecarSettings, base, environ={"EPOCHFS_VIEW": "nfs"})
