"""Whether some process holds an ``flock`` on a file, asked without waiting.

The sampler's lock (one sampler per cache: :mod:`epochfs.sidecar.samplerlock`) and the folder
view's publisher lock (:mod:`.publisherlock`) are both advisory locks the kernel drops when their
holder dies, so "is it held?" is one question: try a shared lock without blocking; refused means
held. The try takes nothing that lasts: closing the descriptor drops it.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

SAMPLER_LOCK_NAME = "sampler.lock"
"""The sampler's lock file in the cache, held for the sampler's life (:mod:`epochfs.sidecar.samplerlock`
takes it); named here so that the store's readers, the views among them, can ask whether a sampler
runs (:func:`sampler_running`) without the sidecar's modules."""


def sampler_running(root: Path) -> bool:
    """Whether a sampler holds the lock of the cache at ``root`` now."""
    return holder(root / SAMPLER_LOCK_NAME) is True


def holder(path: Path) -> bool | None:
    """None: no such file; True: a process holds an exclusive ``flock`` on it; False: nobody does."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # drops the shared lock taken above, if any
    return False


__all__ = ["holder"]
