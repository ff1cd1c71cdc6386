"""The cache's sampler lock: one ``epochfs sample`` per cache, and a way to ask whether one runs.

Its own module (not the sampler command's) because ``epochfs relist`` asks whether a sampler holds
it, and that command must not import the sampler to learn a file name. The lock is an ``flock`` on
:data:`LOCK_NAME`, which the kernel drops when its holder exits, ``kill -9`` included, so a crashed
sampler never leaves the cache locked.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from epochfs.sidecar.config import ConfigError
from epochfs.sidecar.store import flocks

LOCK_NAME = "sampler.lock"
"""The lock file in the cache folder; it holds the holder's pid (shown when a second is refused)."""


def hold(cache: Path) -> int:
    """Hold the cache's sampler lock for the life of the process and return its descriptor. Two
    samplers on one cache would each count only their own reservations and the second one's
    recovery would delete the first one's downloads in flight: the second is refused
    (:class:`ConfigError` naming the first one's pid)."""
    fd = os.open(cache / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
        os.close(fd)
        raise ConfigError(
            f"--cache: {cache} is in use by another epochfs sample (pid {holder}); "
            f"one sampler per cache"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def held(cache: Path) -> bool:
    """Whether a sampler holds the cache's lock now."""
    return flocks.holder(cache / LOCK_NAME) is True
