"""The cache's locks: one ``epochfs sidecar`` and one ``epochfs sample`` per cache, and a way to
ask whether a sampler runs.

Its own module (not the sampler command's) because ``epochfs relist`` and ``epochfs status``
ask whether a sampler holds its lock, and those commands must not import the sampler to learn a
file name. Each lock is an ``flock`` on a file in the cache, which the kernel drops when its holder
exits, ``kill -9`` included, so a crashed sampler or supervisor never leaves the cache locked.

The readers' question (:func:`held`) takes a *shared* lock on the sampler's file for an instant:
a sampler that starts in that instant finds its exclusive lock refused by a reader, not by another
sampler. So :func:`hold` tells the two apart and waits out the readers (:data:`READERS_WAIT`); only
an exclusive holder, another sampler, is a refusal at once.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from epochfs.sidecar.config import ConfigError
from epochfs.sidecar.store import flocks

LOCK_NAME = flocks.SAMPLER_LOCK_NAME
"""The lock file in the cache folder; it holds the holder's pid (shown when a second is refused)."""

SIDECAR_PID_NAME = "sidecar.pid"
"""The running supervisor's pid, beside the lock it holds on the cache folder (:func:`hold_sidecar`)."""

READERS_WAIT = 10.0
"""Seconds :func:`hold` waits for readers' shared locks to go (each lasts an ``open`` and a
``close``: a reader holding one this long is stuck, and the sampler is refused as if held)."""

READERS_POLL = 0.005
"""Seconds between two tries while only readers hold the lock."""


def _pause(seconds: float) -> None:
    """Wait between two tries of the lock (a function of its own so that a test can step it)."""
    time.sleep(seconds)


def _holder(fd: int) -> str:
    return os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"


def _exclusive_elsewhere(path: Path) -> bool:
    """Whether another process holds ``path``'s lock exclusively (a shared try on a descriptor of
    our own is refused), as opposed to readers holding it shared (the try succeeds, and is dropped
    at once)."""
    return flocks.holder(path) is True


def _take(fd: int, path: Path, *, wait_readers: float) -> bool:
    """Take ``fd``'s exclusive lock; False when another process holds it exclusively. Readers'
    shared locks are waited out for up to ``wait_readers`` seconds (then False as well)."""
    deadline = time.monotonic() + wait_readers
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        if _exclusive_elsewhere(path) or time.monotonic() >= deadline:
            return False
        _pause(READERS_POLL)


def _write_pid(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)


def hold(cache: Path) -> int:
    """Hold the cache's sampler lock for the life of the process and return its descriptor. Two
    samplers on one cache would each count only their own reservations and the second one's
    recovery would delete the first one's downloads in flight: the second is refused
    (:class:`ConfigError` naming the first one's pid). A reader asking whether a sampler runs
    (:func:`held`) is waited for: the sampler's start never fails on ``epochfs status``. A lock
    file another user left (the start check refuses that first; here for a file put there since)
    is the same one-line refusal naming ``--cache``, never a traceback the sidecar restarts."""
    path = cache / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except PermissionError as e:
        from epochfs.sidecar.volumes import unwritable_refusal  # volumes imports this module

        why = (e.strerror or "permission denied").lower()
        raise ConfigError(unwritable_refusal(cache, path, why)) from None
    if not _take(fd, path, wait_readers=READERS_WAIT):
        holder = _holder(fd)
        os.close(fd)
        raise ConfigError(
            f"--cache: {cache} is in use by another epochfs sample (pid {holder}); "
            f"one sampler per cache"
        )
    _write_pid(fd)
    return fd


def hold_sidecar(cache: Path) -> int:
    """Hold the cache's sidecar lock for the life of the supervisor and return its descriptor
    (close-on-exec: no child inherits it, so it goes with the supervisor alone). Taken before the
    supervisor touches anything in the cache: a second sidecar on it would empty the first one's
    metric files, and its sampler could take the cache from the first one's between two restarts.
    Refused at once (:class:`ConfigError` naming the running sidecar's pid). Nobody takes it
    shared, so no wait.

    The lock is on the cache folder itself, which needs no file made: a sidecar started on a full
    volume waits for room (docs/sidecar.md), where a lock file to create refused its start. Its
    pid goes in :data:`SIDECAR_PID_NAME` where there is room, for the refusal's line."""
    fd = os.open(cache, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        try:
            holder = (cache / SIDECAR_PID_NAME).read_text(encoding="ascii", errors="replace").strip() or "?"
        except OSError:
            holder = "?"
        raise ConfigError(
            f"--cache: {cache} is in use by another epochfs sidecar (pid {holder}); "
            f"one sidecar per cache"
        ) from None
    try:
        pid = os.open(cache / SIDECAR_PID_NAME, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            os.write(pid, f"{os.getpid()}\n".encode())
        finally:
            os.close(pid)
    except OSError:
        pass  # no room for it: the lock holds all the same, the refusal says "pid ?"
    return fd


def holder_pid(cache: Path) -> int | None:
    """The pid the lock's last holder wrote into its lock file (:func:`hold`), None when the file
    says none: the running sampler's while :func:`held` says one runs, whose records of the cache
    are then the running run's."""
    try:
        text = (cache / LOCK_NAME).read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def held(cache: Path) -> bool:
    """Whether a sampler holds the cache's lock now."""
    return flocks.sampler_running(cache)
