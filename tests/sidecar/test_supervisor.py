"""``epochfs sidecar`` for real: a supervisor, a sampler and a FUSE server against moto's S3 server.

Each test mounts for real (root, /dev/fuse) and leaves nothing mounted or running: the helper stops
the sidecar with SIGTERM and asserts exit 0 within seconds and no mount left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from common import S3Server, free_port, put_objects, random_objects, wait_until
from sidecar_helpers import EPOCHFS, cleanup_mounts, running_sidecar, sidecar_argv

from epochfs.fuse.mounting import find_mount, is_dead, lazy_unmount, mount_table, wait_for_mount
from epochfs.sidecar.store import Store

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]

BUCKET = "data"


def remote_with(s3: S3Server, count: int, size: int) -> dict[str, bytes]:
    objects = random_objects(count, size)
    put_objects(s3, BUCKET, objects)
    return objects


def check_epoch_bytes(mount: Path, n: int, objects: dict[str, bytes]) -> list[str]:
    """Every file of epoch-n equals the remote object at that key; returns its file list."""
    root = mount / f"epoch-{n}"
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())
    assert files, f"epoch-{n} is empty"
    for rel in files:
        assert (root / rel).read_bytes() == objects[rel], f"epoch-{n}/{rel} differs from the remote"
    manifest = (mount / ".epochfs" / f"epoch-{n}.manifest").read_text().splitlines()
    assert [line.split("\t")[0] for line in manifest[1:]] == files
    return files


def samples_now(cache: Path) -> int:
    with Store(cache) as store:
        return store.stats().samples


def fuse_mounts_at(path: Path) -> int:
    target = os.path.abspath(path)
    return sum(1 for e in mount_table() if e.mount_point == target)


@pytest.mark.long
def test_epochs_equal_the_remote_and_grow_then_sigterm_is_clean(s3: S3Server, tmp_path: Path) -> None:
    objects = remote_with(s3, 60, 32 * 1024)
    extra = ("--capacity", "64Mi", "--min-samples", "5", "--concurrency", "4", "--max-rate", "400Ki")
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint, extra=extra) as car:
        health = car.health()
        assert health["code"] == 200 and health["mount"] == "ok", health
        first = check_epoch_bytes(car.mount, 0, objects)
        assert len(first) >= 5
        wait_until(lambda: samples_now(car.cache) >= len(first) + 5, timeout=60, what="more samples")
        second = check_epoch_bytes(car.mount, 1, objects)
        assert set(first) <= set(second) and len(second) > len(first)  # nothing evicted: 64 MiB
        assert os.readlink(car.mount / "latest") == "epoch-1"
        # /metrics shows the store's occupancy and epochs.
        with Store(car.cache) as store:
            s = store.stats()
        assert car.metric("epochfs_cache_capacity_bytes") == 64 * 1024**2
        assert car.metric("epochfs_epoch_latest") == 1
        assert car.metric("epochfs_cuts_total") == s.cuts_total == 2
        assert car.metric("epochfs_mounted") == 1
        assert car.metric("epochfs_child_up", child="sampler") == 1
        # The children's own counters arrive through the multiprocess folder.
        assert (car.metric("epochfs_fuse_requests_total", op="getattr") or 0) > 0
        assert (car.metric("epochfs_remote_fetch_seconds_count") or 0) >= s.fetched_total
        # Opens of the epoch's files were counted as samples served (fanotify on the cache; the
        # counter gathers its events for up to 50 ms: served.GATHER_SECONDS).
        wait_until(lambda: (car.metric("epochfs_served_samples_total") or 0) >= len(first) + len(second),
                   timeout=10, what="the opens counted as samples served")
        # The live exposition passes promtool; `epochfs status --mount` works while it runs.
        check = subprocess.run(["promtool", "check", "metrics"], input=car.metrics(),
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        out = subprocess.run([*EPOCHFS, "status", "--mount", str(car.mount)], capture_output=True,
                             text=True, check=True).stdout
        assert "epoch" in out and "backpressure: no" in out
        # Every object cached: the sampler waits by design, and says so (the stall alert,
        # EpochfsSamplerStalled, stays quiet on epochfs_sampler_idle == 1).
        wait_until(lambda: samples_now(car.cache) == len(objects), timeout=60, what="every object")
        wait_until(lambda: car.metric("epochfs_sampler_idle") == 1, what="the sampler idle by design")
    # running_sidecar checked exit 0 within 10 s and no mount left; the store opens cleanly.
    with Store(tmp_path / "cache") as store:
        report = store.recover()
        assert report.integrity == "ok" and report.repairs_marked == 0
        assert store.stats().samples >= len(second)


def test_kill_sampler_during_reads(s3: S3Server, tmp_path: Path) -> None:
    objects = remote_with(s3, 80, 32 * 1024)
    extra = ("--capacity", "64Mi", "--min-samples", "5", "--concurrency", "2", "--max-rate", "200Ki")
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint, extra=extra) as car:
        files = check_epoch_bytes(car.mount, 0, objects)
        errors: list[str] = []
        rounds = [0]
        stop = threading.Event()

        def reader() -> None:
            while not stop.is_set():
                for rel in files:
                    try:
                        if (car.mount / "epoch-0" / rel).read_bytes() != objects[rel]:
                            errors.append(f"wrong bytes in {rel}")
                    except OSError as e:
                        errors.append(f"{rel}: {e}")
                rounds[0] += 1

        t = threading.Thread(target=reader)
        t.start()
        try:
            old = car.child_pid("sampler")
            assert old is not None
            wait_until(lambda: rounds[0] >= 2, timeout=20, what="reads before the kill")
            os.kill(old, signal.SIGKILL)
            wait_until(lambda: car.child_pid("sampler") not in (None, old), timeout=20,
                       what="sampler restarted")
            before = samples_now(car.cache)
            wait_until(lambda: samples_now(car.cache) > before, timeout=30, what="sampler fetching again")
            seen = rounds[0]
            wait_until(lambda: rounds[0] >= seen + 2, timeout=20, what="reads after the restart")
        finally:
            stop.set()
            t.join()
        assert errors == []
        assert "restarting" in car.log_text()
        assert car.metric("epochfs_child_restarts_total", child="sampler") == 1


def test_kill_fuse_server_remounts_within_10s(s3: S3Server, tmp_path: Path) -> None:
    objects = remote_with(s3, 20, 16 * 1024)
    extra = ("--capacity", "64Mi", "--min-samples", "5")
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint, extra=extra) as car:
        before = check_epoch_bytes(car.mount, 0, objects)
        old = car.child_pid("fuse")
        assert old is not None
        killed = time.monotonic()
        os.kill(old, signal.SIGKILL)

        def back() -> bool:
            pid = car.child_pid("fuse")
            return pid not in (None, old) and car.get("/readyz")[0] == 200
        wait_until(back, timeout=10, what="the mount back after kill -9 of the FUSE server")
        took = time.monotonic() - killed
        print(f"mount back {took:.2f}s after kill -9 of the FUSE server")
        assert took < 10
        assert fuse_mounts_at(car.mount) == 1, "mounts stacked"
        assert fuse_mounts_at(car.cache / "objects-ro") == 1, "link-root binds stacked"
        assert check_epoch_bytes(car.mount, 0, objects) == before
        assert car.metric("epochfs_child_restarts_total", child="fuse") == 1


def run_sidecar_cli(
    tmp_path: Path, mount: Path, s3_endpoint: str = "http://127.0.0.1:9"
) -> subprocess.CompletedProcess[str]:
    argv = sidecar_argv(remote=f"s3://{BUCKET}", endpoint=s3_endpoint, cache=tmp_path / "cache",
                        mount=mount, port=free_port())
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def test_view_in_a_subdirectory_of_a_volume_never_touches_the_volume(s3: S3Server, tmp_path: Path) -> None:
    """The pod's layout: the shared volume is a mount point of its own; the sidecar creates the
    view's folder inside it, mounts there, remounts there after a crash, and leaves the volume's
    mount point alone at every step (a detached volume would cut the trainer off for good)."""
    objects = remote_with(s3, 12, 8 * 1024)
    volume = tmp_path / "volume"
    volume.mkdir()
    subprocess.run(["mount", "--bind", str(volume), str(volume)], check=True)
    try:
        def volume_mounted() -> bool:
            entry = find_mount(volume)
            return entry is not None and not entry.fstype.startswith("fuse")

        r = run_sidecar_cli(tmp_path, volume)  # the volume's own mount point: refused, with the fix
        assert r.returncode == 2 and "subdirectory" in r.stderr and f"{volume}/view" in r.stderr
        assert volume_mounted()
        r = subprocess.run([*EPOCHFS, "unmount", "--mount", str(volume)], capture_output=True, text=True)
        assert r.returncode == 1 and "left alone" in r.stdout and volume_mounted()

        view = volume / "view"
        extra = ("--capacity", "64Mi", "--min-samples", "4")
        with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint, extra=extra,
                             mount=view) as car:
            assert fuse_mounts_at(view) == 1 and volume_mounted()
            before = check_epoch_bytes(view, 0, objects)
            old = car.child_pid("fuse")
            assert old is not None
            os.kill(old, signal.SIGKILL)
            wait_until(lambda: car.child_pid("fuse") not in (None, old) and car.get("/readyz")[0] == 200,
                       timeout=10, what="the view back after kill -9 of the FUSE server")
            assert fuse_mounts_at(view) == 1 and volume_mounted()
            assert check_epoch_bytes(view, 0, objects) == before
        assert find_mount(view) is None and volume_mounted()
    finally:
        lazy_unmount(volume, any_kind=True)


def test_bad_mount_points_exit_2(tmp_path: Path) -> None:
    missing = run_sidecar_cli(tmp_path, tmp_path / "nope" / "view")
    assert missing.returncode == 2 and "--mount" in missing.stderr and "does not exist" in missing.stderr
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    r = run_sidecar_cli(tmp_path, full)
    assert r.returncode == 2 and "not empty" in r.stderr
    afile = tmp_path / "afile"
    afile.write_text("x")
    r = run_sidecar_cli(tmp_path, afile)
    assert r.returncode == 2 and "--mount" in r.stderr
    busy = tmp_path / "busy"
    busy.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(busy)], check=True)
    try:
        r = run_sidecar_cli(tmp_path, busy)
        assert r.returncode == 2 and "already" in r.stderr and "tmpfs" in r.stderr
    finally:
        lazy_unmount(busy, any_kind=True)
    assert find_mount(busy) is None
    for line in (missing.stderr + r.stderr).splitlines():  # nothing was started
        assert not line.startswith("[sampler]") and not line.startswith("[fuse]")


def test_dead_mount_at_start_is_cleaned(s3: S3Server, tmp_path: Path) -> None:
    objects = remote_with(s3, 10, 8 * 1024)
    cache, mount = tmp_path / "cache", tmp_path / "mnt"
    mount.mkdir()
    Store(cache, create=True).close()  # epochfs mount serves an epochfs cache only (issue 21)
    # A FUSE server killed with -9 leaves a dead mount ("Transport endpoint is not connected").
    server = subprocess.Popen([*EPOCHFS, "mount", "--cache", str(cache), "--mount", str(mount)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_for_mount(mount, timeout=20, alive=lambda: server.poll() is None)
        server.kill()
        server.wait()
        assert is_dead(mount)
        with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint,
                             extra=("--min-samples", "3")) as car:
            assert fuse_mounts_at(car.mount) == 1
            check_epoch_bytes(car.mount, 0, objects)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        cleanup_mounts(mount, cache / "objects-ro")


def test_second_signal_exits_at_once(s3: S3Server, tmp_path: Path) -> None:
    remote_with(s3, 5, 4 * 1024)
    metrics_port = free_port()
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint,
                         extra=("--min-samples", "1", "--metrics-port", str(metrics_port)),
                         expect_exit=128 + signal.SIGINT) as car:
        # /metrics on its own port (EPOCHFS_METRICS_PORT / --metrics-port), and only there.
        body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read()
        assert b"epochfs_cache_capacity_bytes" in body
        assert car.get("/metrics")[0] == 404 and car.get("/healthz")[0] == 200
        # Freeze the sampler so the orderly stop waits on it (its 5 s grace), then signal twice.
        sampler = car.child_pid("sampler")
        assert sampler is not None
        os.kill(sampler, signal.SIGSTOP)
        car.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: "send again to exit at once" in car.log_text(), timeout=10,
                   what="the first signal handled")
        started = time.monotonic()
        car.proc.send_signal(signal.SIGINT)
        car.proc.wait(timeout=5)
        assert time.monotonic() - started < 2
        assert car.proc.returncode == 128 + signal.SIGINT
        wait_until(lambda: find_mount(car.mount) is None, timeout=5, what="mount gone")
        wait_until(lambda: not os.path.exists(f"/proc/{sampler}") or
                   Path(f"/proc/{sampler}/stat").read_text().split()[2] == "Z", timeout=5,
                   what="the frozen sampler killed")


def test_hung_fuse_server_is_replaced(s3: S3Server, tmp_path: Path) -> None:
    objects = remote_with(s3, 10, 8 * 1024)
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint,
                         extra=("--min-samples", "3")) as car:
        before = check_epoch_bytes(car.mount, 0, objects)
        old = car.child_pid("fuse")
        assert old is not None
        os.kill(old, signal.SIGSTOP)  # alive but answering nothing: stats of the mount hang
        try:
            def replaced() -> bool:
                pid = car.child_pid("fuse")
                return pid not in (None, old) and car.get("/readyz")[0] == 200
            # Three probes of 2 s each time out, then kill, lazy unmount, new server.
            wait_until(replaced, timeout=30, what="a new FUSE server after the old one hung")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(old, signal.SIGCONT)
        assert fuse_mounts_at(car.mount) == 1
        assert check_epoch_bytes(car.mount, 0, objects) == before
        assert "mount answered hung" in car.log_text()


def test_ready_in_schedule_mode_means_epoch0_can_be_cut(s3: S3Server, tmp_path: Path) -> None:
    objects = remote_with(s3, 30, 8 * 1024)
    # Slow sampling: readiness after the first sample would be premature (epoch 0 needs 8).
    extra = ("--schedule", "initial=8,growth=2", "--min-samples", "1", "--concurrency", "1",
             "--max-rate", "32Ki")
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint, extra=extra) as car:
        files = check_epoch_bytes(car.mount, 0, objects)  # the lookup cuts at once: ready was true
        assert len(files) == 8


def test_children_die_with_a_killed_supervisor(s3: S3Server, tmp_path: Path) -> None:
    remote_with(s3, 5, 4 * 1024)
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint,
                         extra=("--min-samples", "1"), expect_exit=-signal.SIGKILL) as car:
        pids = [car.child_pid("sampler"), car.child_pid("fuse")]
        assert None not in pids
        metric_files = car.cache / "metrics"
        wait_until(lambda: any(metric_files.glob("*.db")), timeout=15,
                   what="the children's metric files in the cache")
        car.proc.kill()  # no chance to clean up: PR_SET_PDEATHSIG must stop the children
        car.proc.wait()

        def gone(pid: int) -> bool:
            try:
                return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
            except FileNotFoundError:
                return True
        wait_until(lambda: all(gone(p) for p in pids if p is not None), timeout=15,
                   what="children gone after kill -9 of the supervisor")
        # The FUSE server unmounted on its SIGTERM; a dead mount would be cleaned at next start.
        wait_until(lambda: find_mount(car.mount) is None or is_dead(car.mount), timeout=10,
                   what="no live mount left")
        cleanup_mounts(car.mount, car.cache / "objects-ro")


def test_probes_of_a_hung_mount_leave_one_thread_not_one_each(tmp_path: Path) -> None:
    """A stopped FUSE server makes every stat hang: probes every few seconds must not pile up
    stuck threads (one stays, the others answer "hung" at once)."""
    from fuse_helpers import admit, freeze, make_objects, mounted, open_store

    from epochfs.sidecar.supervisor import probe

    store = open_store(tmp_path / "cache")
    admit(store, make_objects(2, 100))
    store.cut(0)
    with mounted(tmp_path / "cache", tmp_path / "mnt") as m:
        assert probe(m.path, timeout=2) == "ok"
        freeze(m.proc)  # every thread stopped: right after kill() an idle worker could still answer
        try:
            before = threading.active_count()
            started = time.monotonic()
            answers = [probe(m.path, timeout=0.3) for _ in range(10)]
            assert answers == ["hung"] * 10
            assert threading.active_count() <= before + 1
            assert time.monotonic() - started < 3, "later probes do not wait for the stuck one"
        finally:
            os.kill(m.proc.pid, signal.SIGCONT)
        wait_until(lambda: probe(m.path, timeout=2) == "ok", timeout=10, what="the mount answering again")
    store.close()


@pytest.mark.parametrize("remote", ["missing-folder", "missing-bucket"])
def test_a_remote_the_sampler_refuses_stops_the_sidecar_with_the_reason(
        s3: S3Server, tmp_path: Path, remote: str) -> None:
    """A typo must not restart the sampler forever: the sampler exits 2 at its start (no such
    folder, no such bucket), and the sidecar stops with exit 2, the sampler's reason on its last
    line and in the termination message Kubernetes shows; nothing is left mounted."""
    url = f"file://{tmp_path / 'no-such-folder'}" if remote == "missing-folder" else "s3://no-such-bucket"
    term = tmp_path / "termination-log"
    term.write_text("")
    mount = tmp_path / "view"
    argv = [*sidecar_argv(remote=url, endpoint=s3.endpoint, cache=tmp_path / "cache", mount=mount,
                          port=free_port()), "--termination-log", str(term)]
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "x",
           "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1"}
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    last = r.stderr.strip().splitlines()[-1]
    assert r.returncode == 2, r.stderr[-2000:]
    assert last.startswith("epochfs sidecar: the sampler refused its settings") and "--remote" in last, last
    assert "restarting" not in r.stderr
    assert "--remote" in term.read_text()
    assert find_mount(mount) is None
