"""Helpers for FUSE tests: fill a cache through the Store API and run ``epochfs mount`` for real.

Caches are populated the way the sampler does it (reserve, temp file, fsync, admit, cut), so these
tests do not depend on the sampler. ``mounted`` starts the real CLI in a subprocess, waits for the
mount, and always unmounts and stops it, printing the server log when the test body failed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from epochfs.fuse.mounting import MountEntry, find_mount, lazy_unmount, wait_for_mount
from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.store import Admission, Policy, Store

ROOT = Path(__file__).resolve().parent.parent
EPOCHFS = [sys.executable, "-m", "epochfs.sidecar.cli"]


def sid_of(key: str) -> str:
    return hashlib.blake2b(key.encode(), digest_size=16).hexdigest()


def open_store(cache: Path, *, capacity: int = 1 << 30, keep_epochs: int = 2, min_samples: int = 1,
               in_use_seconds: float = 300.0, headroom: float = 0.25) -> Store:
    store = Store(cache, create=True)
    store.configure(Policy(capacity=capacity, keep_epochs=keep_epochs, min_samples=min_samples,
                           in_use_seconds=in_use_seconds, headroom=headroom))
    return store


def admit(store: Store, objects: dict[str, bytes]) -> None:
    """Admit ``objects`` (key -> bytes) as the sampler would; keys double as relative paths."""
    reservations = Reservations(store)
    items = []
    for key, body in objects.items():
        if not reservations.reserve(len(body)):
            raise RuntimeError(f"no room for {key} ({len(body)} bytes)")
        temp = store.temp_path()
        with open(temp, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        checksum = "md5:" + hashlib.md5(body).hexdigest()
        items.append(Admission(key, sid_of(key), len(body), checksum, "v1", temp))
    reservations.admit(items)


def cut_epochs(store: Store, epochs: int, each: int = 10, size: int = 100) -> None:
    """Admit ``each`` new objects and cut an epoch, ``epochs`` times (epochs 0, 1, ... of a fresh
    store): a cache with epochs of distinct samples."""
    objects = make_objects(epochs * each, size)
    keys = sorted(objects)
    for n in range(epochs):
        admit(store, {k: objects[k] for k in keys[n * each:(n + 1) * each]})
        assert store.cut() == n


def make_objects(count: int, size: int, *, prefix: str = "train/", seed: int = 0,
                 start: int = 0) -> dict[str, bytes]:
    rng = random.Random(seed * 1_000_003 + start)
    return {f"{prefix}{i:05d}.bin": rng.randbytes(size) for i in range(start, start + count)}


def files_under(root: Path) -> dict[str, bytes]:
    """Relative path -> bytes of every file below ``root``, read through ``os.walk`` and ``open``."""
    out = {}
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            p = Path(dirpath) / name
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


@dataclass
class Mount:
    """A running ``epochfs mount``."""

    path: Path
    cache: Path
    proc: subprocess.Popen[bytes]
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum} while a test mount was up")


def _wait_replaced(mount: Path, hung: MountEntry, deadline: float, alive: Callable[[], bool]) -> None:
    """Return once ``hung`` is no longer the mount at ``mount`` (or the server died, or the
    deadline passed: the wait for the new mount then says so)."""
    while find_mount(mount) == hung and alive() and time.monotonic() < deadline:
        time.sleep(0.05)  # polls the mount table for the server's detach of the hung mount


@contextlib.contextmanager
def mounted(cache: Path, mount: Path, *, args: tuple[str, ...] = (), timeout: float = 20.0,
            env: dict[str, str] | None = None, over: MountEntry | None = None) -> Iterator[Mount]:
    """Run ``epochfs mount`` on ``cache`` at ``mount`` for the duration of the block.

    ``over``: a hung mount (a frozen server's) at ``mount``, which the new server is to take for
    dead and replace. The new mount is probed once that one has left the mount table: a probe
    of the hung mount gets no answer and waits out its timeout (5 s) each time.
    """
    if find_mount(mount) is None:  # a dead mount is left for the server to clean up
        mount.mkdir(parents=True, exist_ok=True)
    log = mount.parent / f"{mount.name}.server.log"
    with open(log, "wb") as out:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen(
            [*EPOCHFS, "--log-level", "DEBUG", "mount", "--cache", str(cache), "--mount", str(mount),
             *args],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
        )
    m = Mount(mount, cache, proc, log)
    failed = True
    # A SIGTERM to pytest (a CI timeout) would end it without running this cleanup and leave a
    # mount behind; turn it into an exception while a mount is up.
    previous = signal.getsignal(signal.SIGTERM) or signal.SIG_DFL
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        deadline = time.monotonic() + timeout
        if over is not None:
            _wait_replaced(mount, over, deadline, alive=lambda: proc.poll() is None)
        left = max(0.0, deadline - time.monotonic())
        if not wait_for_mount(mount, timeout=left, alive=lambda: proc.poll() is None):
            raise RuntimeError(f"epochfs mount did not come up (exit {proc.poll()}):\n{m.log_text()}")
        yield m
        failed = False
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop(m)
        if failed:
            sys.stderr.write(f"--- epochfs mount log ({log}) ---\n{m.log_text()[-20000:]}\n")


def freeze(proc: subprocess.Popen[bytes]) -> None:
    """SIGSTOP a child of ours and return only once all of its threads are stopped.

    ``kill`` only queues SIGSTOP: it wakes one thread, which starts the group stop when it next
    runs, and until then the other threads run on. A FUSE server's workers, blocked in a read of
    /dev/fuse, take and answer a request that comes in meanwhile, and under load that window lasts
    milliseconds (a statvfs sent right after ``kill`` was answered). ``waitid(WSTOPPED)`` returns
    when the kernel reports the stop to the parent, which it does only once the last thread has
    stopped. WNOWAIT leaves the report (or an exit) for Popen; WEXITED ends the wait for a child
    that died instead of stopping.
    """
    proc.send_signal(signal.SIGSTOP)
    info = os.waitid(os.P_PID, proc.pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT)
    if info is None or info.si_code != os.CLD_STOPPED:
        raise RuntimeError(f"pid {proc.pid} did not stop: {info}")


def stop(m: Mount, *, sig: int = signal.SIGTERM) -> int | None:
    """Signal the server, wait, and make sure nothing is left mounted or running."""
    if m.proc.poll() is None:
        m.proc.send_signal(sig)
        try:
            m.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            m.proc.kill()
            m.proc.wait()
    deadline = time.monotonic() + 5
    while find_mount(m.path) is not None and time.monotonic() < deadline:
        lazy_unmount(m.path)
    ro = m.cache / "objects-ro"
    if find_mount(ro) is not None:
        lazy_unmount(ro, any_kind=True)
    return m.proc.returncode


def errno_of(call: Callable[[], object]) -> int | None:
    """The errno ``call`` raised (None: it returned)."""
    try:
        call()
    except OSError as e:
        return e.errno
    return None
