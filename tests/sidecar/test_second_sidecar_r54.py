"""One sidecar per cache, and a sampler lock that neither a reader nor another sampler turns into a stop.

Three defects, each shown with real processes (the sidecar CLI over a ``file://`` remote, real FUSE
mounts, always unmounted; real lock holders in processes of their own):

* a second ``epochfs sidecar`` on a running sidecar's cache, refused or not (its port in use, one
  sampler per cache), first emptied the cache's ``metrics/`` folder: the running sidecar's FUSE and
  sampler series were gone for good. Now the supervisor takes the cache's sidecar lock before
  anything else and a second one is refused at once (exit 2, one line naming the first one's pid).
* a sampler child refused the cache's sampler lock (another ``epochfs sample`` holds it) was taken
  for a refused setting: the sidecar stopped (exit 2) and unmounted its trainer's view. Now it is a
  crash, restarted with the backoff (docs/sidecar.md, "Crashes").
* a reader asking whether a sampler runs (``epochfs status --cache``, ``epochfs relist``: a shared
  ``flock`` for an instant) made a starting sampler's exclusive lock fail. Now the sampler waits out
  readers and is refused only by an exclusive holder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import free_port, wait_until
from sidecar_helpers import cleanup_mounts, file_remote, running_sidecar, sidecar_argv

from epochfs.fuse.mounting import find_mount
from epochfs.sidecar import samplerlock
from epochfs.sidecar.config import ConfigError

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]

EXTRA = ("--kube-reporting", "0")

# A process that holds the sampler lock of the cache in argv[1], shared (a reader stuck in its
# instant) or exclusive (another sampler), says "held", and drops it when told (a line on stdin),
# saying "gone"; it exits at the end of its stdin.
_HOLDER = (
    "import fcntl, os, sys\n"
    "fd = os.open(os.path.join(sys.argv[1], 'sampler.lock'), os.O_RDWR | os.O_CREAT, 0o644)\n"
    "fcntl.flock(fd, fcntl.LOCK_SH if sys.argv[2] == 'shared' else fcntl.LOCK_EX)\n"
    "if sys.argv[2] != 'shared': os.pwrite(fd, b'%d\\n' % os.getpid(), 0)\n"
    "print('held', flush=True)\n"
    "sys.stdin.readline()\n"
    "os.close(fd)\n"
    "print('gone', flush=True)\n"
    "sys.stdin.read()\n"
)


class Holder:
    """A process of its own holding the cache's sampler lock until :meth:`drop`."""

    def __init__(self, cache: Path, how: str) -> None:
        cache.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(cache), how],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "held\n"
        self.dropped = False

    def drop(self) -> None:
        """Release the lock, and return once it is released."""
        if self.dropped:
            return
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline() == "gone\n"
        self.dropped = True

    def stop(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    made: list[Holder] = []
    yield made
    for h in made:
        h.stop()




def _metric_files(cache: Path) -> set[str]:
    return {p.name for p in (cache / "metrics").glob("*.db")}


@pytest.mark.parametrize("port", ["its own", "the first one's"])
def test_a_second_sidecar_on_the_cache_is_refused_at_once_and_touches_nothing(
    tmp_path: Path, port: str
) -> None:
    remote = file_remote(tmp_path, size=2048)
    with running_sidecar(tmp_path, remote=remote, endpoint="", extra=EXTRA) as car:
        wait_until(lambda: car.child_pid("sampler") and car.child_pid("fuse"), what="both children")
        children = (car.child_pid("sampler"), car.child_pid("fuse"))
        before = wait_until(lambda: _metric_files(car.cache), what="the children's metric files")
        mount2 = tmp_path / "mnt2"
        mount2.mkdir()
        argv = sidecar_argv(remote=remote, endpoint="", cache=car.cache, mount=mount2,
                            port=free_port() if port == "its own" else car.port, extra=EXTRA)
        try:
            second = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        finally:
            cleanup_mounts(mount2)
        # The first one's children, their metric files and its view are as they were.
        assert before <= _metric_files(car.cache), (before, _metric_files(car.cache))
        assert (car.child_pid("sampler"), car.child_pid("fuse")) == children
        assert find_mount(car.mount) is not None
        assert car.proc.poll() is None
        said = second.stderr.strip().splitlines()[-1]
        assert second.returncode == 2, second.stderr
        assert said == (f"epochfs sidecar: --cache: {car.cache} is in use by another epochfs sidecar "
                        f"(pid {car.proc.pid}); one sidecar per cache"), second.stderr
        assert "started sampler" not in second.stderr, second.stderr
        assert (car.cache / samplerlock.SIDECAR_PID_NAME).read_text().strip() == str(car.proc.pid)


def test_a_sampler_lock_held_elsewhere_is_a_crash_restarted_not_a_stop(
    tmp_path: Path, holders: list[Holder]
) -> None:
    cache = tmp_path / "cache"
    other = Holder(cache, "exclusive")  # an `epochfs sample` run by hand on the cache
    holders.append(other)
    mount = tmp_path / "mnt"
    mount.mkdir()
    log = tmp_path / "sidecar.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            sidecar_argv(remote=file_remote(tmp_path, size=2048), endpoint="", cache=cache, mount=mount,
                         port=free_port(), extra=EXTRA),
            stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        crashed = "sampler could not take the cache's sampler lock"
        wait_until(lambda: crashed in log.read_text() or proc.poll() is not None, timeout=120,
                   what="the sampler's refusal")
        assert proc.poll() is None, f"the sidecar stopped ({proc.returncode}):\n{log.read_text()}"
        assert f"(pid {other.proc.pid})" in log.read_text()
        other.drop()
        # The restart after the backoff takes the lock: a sampler of this sidecar holds it.
        wait_until(lambda: samplerlock.held(cache) or proc.poll() is not None, timeout=120,
                   what="the restarted sampler holding the lock")
        assert proc.poll() is None, f"the sidecar stopped ({proc.returncode}):\n{log.read_text()}"
        assert find_mount(mount) is not None
    finally:
        if proc.poll() is None:
            proc.terminate()
        code = proc.wait(timeout=60)
        cleanup_mounts(mount, cache / "objects-ro")
    assert code == 0, log.read_text()[-5000:]


def test_the_sampler_waits_out_a_reader_holding_its_lock_shared(
    tmp_path: Path, holders: list[Holder], monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    reader = Holder(cache, "shared")  # `epochfs status --cache`, caught in its instant
    holders.append(reader)
    pauses: list[float] = []

    def step(seconds: float) -> None:  # the reader's instant ends while the sampler waits
        pauses.append(seconds)
        reader.drop()

    monkeypatch.setattr(samplerlock, "_pause", step, raising=False)
    fd = samplerlock.hold(cache)
    try:
        assert pauses, "the lock was free at the first try: the reader held nothing"
        assert samplerlock.held(cache) is True
        assert (cache / samplerlock.LOCK_NAME).read_text().strip() == str(os.getpid())
    finally:
        os.close(fd)


def test_another_sampler_holding_the_lock_is_refused_at_once(
    tmp_path: Path, holders: list[Holder], monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    other = Holder(cache, "exclusive")
    holders.append(other)
    pauses: list[float] = []
    monkeypatch.setattr(samplerlock, "_pause", pauses.append, raising=False)
    with pytest.raises(ConfigError, match=rf"in use by another epochfs sample \(pid {other.proc.pid}\)"):
        samplerlock.hold(cache)
    assert pauses == []  # no wait for a holder that is no reader

