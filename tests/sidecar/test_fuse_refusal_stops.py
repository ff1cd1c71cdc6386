"""The FUSE view's refusals stop ``epochfs sidecar`` as the sampler's do, and never loop.

A FUSE server that exits 2 at its start (its settings refused: no CAP_SYS_ADMIN for the link
root's read-only bind, a mount point it cannot use) would say the same at every restart; the
sidecar used to restart it every ~2 s for ever, with ``/readyz`` saying only "the view is not
mounted yet". Now it stops with exit 2, the server's reason on its last line and in the
termination message (docs/sidecar.md, "Crashes"). What the supervisor can tell before any child
starts (a mount point that is the cache, a missing ``--link-root``) it refuses at once. Also here:
``/healthz`` never says the mount is "ok" while nothing is mounted, and the FUSE restart's logged
delay is the one it waits.

Real processes throughout: the sidecar CLI against moto's S3 server, real FUSE mounts, a real
capability drop (``setpriv``), a real stand-in process for the in-process health check.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from common import S3Server, free_port, put_objects, random_objects, wait_until
from sidecar_helpers import cleanup_mounts, running_sidecar, sidecar_argv

from epochfs.fuse.mounting import find_mount
from epochfs.sidecar import config
from epochfs.sidecar.store import Store
from epochfs.sidecar.supervisor.core import Supervisor

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]

BUCKET = "data"
LOOPING = r"fuse exited with status 2 .*restarting in"
"""The supervisor's line when it restarts a FUSE server that refused its settings."""
A_CHILD_STARTED = r"started (sampler|fuse) \(pid"


def run_until(argv: list[str], bad: str) -> tuple[int, str, bool]:
    """Run ``argv`` until it exits, or until a line matches ``bad`` (then stop it with SIGTERM);
    its exit status, its output, and whether ``bad`` was seen. A guard kills a run that does
    neither within minutes, so that a regression fails rather than hangs."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    guard = threading.Timer(180, proc.kill)
    guard.start()
    lines: list[str] = []
    seen = False
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if re.search(bad, line):
                seen = True
                proc.send_signal(signal.SIGTERM)
                lines.extend(proc.stdout)  # the rest, until it has stopped
                break
        code = proc.wait()
    finally:
        guard.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    return code, "".join(lines), seen


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def test_a_fuse_server_without_cap_sys_admin_stops_the_sidecar_with_its_reason(
        s3: S3Server, tmp_path: Path) -> None:
    """No CAP_SYS_ADMIN: the FUSE server cannot make the link root's read-only bind and exits 2
    at its start; the sidecar stops at that first refusal (before: a restart every ~2 s)."""
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux)")
    put_objects(s3, BUCKET, random_objects(6, 1024))
    cache, mount, term = tmp_path / "cache", tmp_path / "view", tmp_path / "termination-log"
    term.write_text("")
    argv = ["setpriv", "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin", "--",
            *sidecar_argv(remote=f"s3://{BUCKET}", endpoint=s3.endpoint, cache=cache, mount=mount,
                          port=free_port(), extra=("--termination-log", str(term)))]
    try:
        code, out, looped = run_until(argv, LOOPING)
    finally:
        cleanup_mounts(mount, cache / "objects-ro")
    assert not looped, f"the sidecar restarted a FUSE server that refused its settings:\n{out[-3000:]}"
    assert code == 2, out[-3000:]
    last = last_line(out)
    assert last.startswith("epochfs sidecar: the FUSE server refused its settings, so the sidecar "
                           "stops: epochfs mount: --link-root: cannot make a read-only bind"), last
    assert "run with CAP_SYS_ADMIN" in last, "the server's reason is cut at a line break"
    assert term.read_text().startswith("epochfs mount: --link-root: cannot make a read-only bind")
    assert find_mount(mount) is None and find_mount(cache / "objects-ro") is None


@pytest.mark.parametrize("case", ["mount-is-cache", "mount-holds-cache", "missing-link-root",
                                  "link-root-is-cache"])
def test_settings_the_fuse_server_would_refuse_are_refused_before_any_child(
        tmp_path: Path, case: str) -> None:
    """--mount equal to --cache (or a folder that holds it) and a --link-root that does not exist:
    one line naming the flag, exit 2, the termination message, and no child started (before: the
    FUSE server said it at every restart, for ever). A --link-root that is the cache folder, not
    its objects (before: accepted, ready and healthy, every sample a broken link)."""
    cache, mount = tmp_path / "cache", tmp_path / "view"
    extra: tuple[str, ...] = ()
    if case == "mount-is-cache":
        cache.mkdir()
        mount, flag, says = cache, "--mount", "is the cache folder"
    elif case == "mount-holds-cache":
        mount.mkdir()
        cache, flag, says = mount / "cache", "--mount", "holds the cache folder"
    elif case == "missing-link-root":
        extra, flag, says = ("--link-root", str(tmp_path / "nowhere")), "--link-root", "is not a directory"
    else:
        Store(cache, create=True).close()
        extra, flag, says = ("--link-root", str(cache)), "--link-root", "is not a view of the cache's objects"
    term = tmp_path / "termination-log"
    term.write_text("")
    argv = sidecar_argv(remote=f"s3://{BUCKET}", endpoint="http://127.0.0.1:9", cache=cache,
                        mount=mount, port=free_port(), extra=(*extra, "--termination-log", str(term)))
    try:
        code, out, started = run_until(argv, A_CHILD_STARTED)
    finally:
        cleanup_mounts(mount, cache / "objects-ro")
    assert not started, f"a child started:\n{out[-3000:]}"
    last = last_line(out)
    assert code == 2 and last.startswith(f"epochfs sidecar: {flag}: ") and says in last, out[-3000:]
    assert term.read_text().strip() == last
    assert find_mount(mount) is None


def test_healthz_does_not_call_a_mount_ok_while_nothing_is_mounted(tmp_path: Path) -> None:
    """The FUSE server runs (a stand-in process: not mounted yet, or one that never mounts) and
    the mount point is an empty folder, which answers a stat: /healthz said "mount": "ok" and
    200. It says "not mounted" and fails, as /readyz says "the view is not mounted yet"."""
    settings = config.parse(config.SidecarSettings, [
        "--cache", str(tmp_path / "cache"), "--mount", str(tmp_path / "mnt"), "--remote", "s3://unused/p",
    ])
    (tmp_path / "mnt").mkdir()
    sup = Supervisor(settings=settings, sink=sys.stderr)
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        sup.fuse.proc = server
        ok, doc = sup.health()
        assert doc["mount"] == "not mounted" and not ok, doc
    finally:
        server.kill()
        server.wait()
        sup.fuse.proc = None


@pytest.mark.long
def test_the_fuse_restart_logs_the_delay_it_waits(s3: S3Server, tmp_path: Path) -> None:
    """Four quick kills of the FUSE server: the supervisor restarts it after at most 2 s each
    time (REMOUNT_BACKOFF_MAX), and its log says so (before: "restarting in 4.0s" at the fourth,
    while the remount started it again after 2 s)."""
    put_objects(s3, BUCKET, random_objects(8, 1024))
    extra = ("--capacity", "16Mi", "--min-samples", "4")
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint, extra=extra) as car:
        for _ in range(4):
            pid = car.child_pid("fuse")
            assert pid is not None
            os.kill(pid, signal.SIGKILL)

            def remounted(old: int = pid) -> bool:
                return car.child_pid("fuse") not in (None, old) and car.health()["mount"] == "ok"

            wait_until(remounted, timeout=60, what="a new FUSE server mounted")
        log = car.log_text()
    delays = re.findall(r"fuse was killed by signal 9 \(SIGKILL[^)]*\) after [\d.]+s; "
                        r"restarting in ([\d.]+)s", log)
    assert delays == ["0.5", "1.0", "2.0", "2.0"], delays
    assert Supervisor.REMOUNT_BACKOFF_MAX == 2.0
