"""Room for a child's Prometheus multiprocess files, taken before prometheus-client writes one.

prometheus-client makes each of a process's files by extending it to 1 MiB without allocating it
(a sparse file) and writes into it at once through ``mmap``. On a full file system a store
through a mapping into a hole is a SIGBUS that kills the process, not an ``ENOSPC`` it could
handle. The supervisor's children keep those files in the cache's ``metrics/`` folder, on the node
volume, which does fill (other tenants, a budget near the disk's size): a child started while it
was full died 0.3 s after it began.

So each child, first thing, allocates the blocks of the files it will write
(:func:`reserve`, called from the supervisor's child boot). prometheus-client then finds a file
of :data:`RESERVED` bytes, maps it as it is and writes only into allocated blocks. Where the
allocation fails (the volume is full now), the child runs with its metrics kept in-process,
not exported, and says so in one log line, rather than die: the next start of that child exports
them again. Only the supervisor's children call this; plain ``epochfs sample`` runs have no
multiprocess folder.

prometheus-client is not imported here: this runs before anything else in a child.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import MutableMapping

from epochfs.sidecar.metrics_merge import file_names

ENV = "PROMETHEUS_MULTIPROC_DIR"
"""The variable that turns prometheus-client's multiprocess mode on (read when it is imported)."""

RESERVED = 128 * 1024
"""Bytes allocated per file: twice what the FUSE server's counters take with every operation and
errno label set (80 KiB); the sampler's take under 8 KiB. A file that outgrows it is extended by
prometheus-client unallocated again, past what any label set here makes. Dead children's counter
and histogram files stay (their totals are still summed) but are cut to the bytes their values use
when the child is reaped (:func:`epochfs.sidecar.metrics_merge.forget_process`): a restart keeps a
page or a few of them, not this."""


def reserve(environ: MutableMapping[str, str] | None = None, *, pid: int | None = None) -> str | None:
    """Allocate this process's metric files in the folder ``environ[ENV]`` names.

    Returns None when they are ready (or there is no such folder); otherwise why not, having
    removed :data:`ENV` from ``environ`` so that prometheus-client, imported afterwards, keeps
    this process's values in memory. A file that exists (a dead process's of the same pid) is
    allocated in full too: its holes would be as fatal.
    """
    env = os.environ if environ is None else environ
    folder = env.get(ENV)
    if not folder:
        return None
    pid = os.getpid() if pid is None else pid
    made: list[str] = []
    try:
        for name in file_names(pid):
            path = os.path.join(folder, name)
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                made.append(path)
            except FileExistsError:
                fd = os.open(path, os.O_RDWR)
            try:
                size = os.fstat(fd).st_size
                os.posix_fallocate(fd, 0, max(size, RESERVED))
            finally:
                os.close(fd)
    except OSError as e:
        for path in made:  # a dead process's file keeps its totals
            with contextlib.suppress(OSError):
                os.unlink(path)
        env.pop(ENV, None)
        return (f"metrics of this process (pid {pid}) are not exported until it restarts: no room "
                f"for its metric files in {folder} ({e.strerror or e})")
    return None


def reserve_or_warn() -> None:
    """:func:`reserve` for this process, with its one warning line on stderr in the log format
    (logging is not set up yet: this runs before the command's own start)."""
    reason = reserve()
    if reason is None:
        return
    from epochfs.sidecar.logsettings import LOG_FORMAT

    record = logging.LogRecord("epochfs.metrics", logging.WARNING, __file__, 0, reason, None, None)
    sys.stderr.write(logging.Formatter(LOG_FORMAT).format(record) + "\n")
    sys.stderr.flush()
