"""Reading a mount's ``.epochfs/status.json`` for ``epochfs status --mount``: bounded in time and size.

A diagnostic must answer when what it diagnoses does not. A FUSE server that is stopped (SIGSTOP,
a deadlock) leaves every open, read and ``stat`` of its mount blocked for ever, and a folder that
is no mount may hold anything under that name: a fifo, whose open blocks until a writer comes, or
a link to ``/dev/zero``, whose read never ends (7 GB of memory in 20 s). So the file is opened
without blocking (``O_NONBLOCK``: a fifo opens at once), must be a regular file, and is read up to
:data:`MAX_STATUS_BYTES`; and every look at the mount runs in a daemon thread given
:data:`ANSWER_SECONDS` (:func:`within`): a mount that does not answer costs one stuck thread in a
process about to exit, and the command says so and exits 2.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from epochfs.sidecar.config import ConfigError
from epochfs.sidecar.store.digests import BLOCK

T = TypeVar("T")

ANSWER_SECONDS = 10.0
"""How long a look at the mount may take. A live FUSE server answers in milliseconds, a busy one
(a cut of a million samples) in well under a second."""

MAX_STATUS_BYTES = 64 << 20
"""The most of a status.json that is read: the sidecar writes a few KiB (a row per live epoch);
more is not its document."""

_stuck: dict[str, threading.Thread] = {}
_stuck_lock = threading.Lock()


def read_status_file(path: Path) -> bytes:
    """The bytes of ``path``, a regular file of at most :data:`MAX_STATUS_BYTES`; OSError else
    (FileNotFoundError where there is none), never a block on a fifo or an endless read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file (no status document)")
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, BLOCK):
            size += len(chunk)
            if size > MAX_STATUS_BYTES:
                raise OSError(errno.EFBIG, f"more than {MAX_STATUS_BYTES >> 20} MiB (no status document)")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def within(look: Callable[[], T], *, mount: Path, seconds: float = ANSWER_SECONDS) -> T:
    """``look()`` (which reads ``mount``), its result or its exception; a ConfigError when it has
    not answered within ``seconds``. While an earlier look at ``mount`` is still stuck (``--watch``
    reads again every interval), the ConfigError comes at once instead of one more stuck thread."""
    key = str(mount)
    with _stuck_lock:
        stuck = _stuck.get(key)
        if stuck is not None and stuck.is_alive():
            raise ConfigError(_no_answer(mount, seconds, again=True))
    outcome: list[tuple[bool, object]] = []

    def run() -> None:
        try:
            outcome.append((True, look()))
        except BaseException as e:  # handed to the caller's thread, raised there
            outcome.append((False, e))

    worker = threading.Thread(target=run, name="epochfs-status-read", daemon=True)
    worker.start()
    worker.join(seconds)
    if not outcome:
        with _stuck_lock:
            _stuck[key] = worker
        raise ConfigError(_no_answer(mount, seconds, again=False))
    ok, value = outcome[0]
    if not ok:
        assert isinstance(value, BaseException)
        raise value
    return value  # type: ignore[return-value]


def _no_answer(mount: Path, seconds: float, *, again: bool) -> str:
    still = "still does not answer" if again else f"did not answer within {seconds:g} s"
    return (f"--mount: {mount} {still}: a FUSE server that is stopped or hung? `epochfs unmount "
            f"--mount {mount}` detaches it (the sidecar's supervisor mounts it again); `epochfs status "
            "--cache CACHE` reads the index itself")


__all__ = ["ANSWER_SECONDS", "MAX_STATUS_BYTES", "read_status_file", "within"]
