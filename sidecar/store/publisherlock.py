"""The folder view's publisher lock: while no publisher runs, the sampler retires and evicts nothing.

Why: with the folder view (docs/folderview.md) only the publisher takes a retired epoch's folder
down, and the sampler frees a retired epoch's objects as soon as it needs room. While the publisher
is dead (``kill -9``, then the supervisor's backoff of up to 30 s and a Python start) the folder
would keep showing epochs whose files are gone. So a publisher holds an ``flock`` on
:data:`LOCK_NAME` in the cache from the end of its first recovery (the folders of the epochs the
store retired are gone by then) until it exits, and the store's :func:`.epochpins.retire` and
:func:`.eviction.evict` ask :func:`may_release` first: where the file exists and nobody holds it,
they do nothing, so an object a published epoch shows stays on disk until a publisher is back and
has taken the retired epochs' folders down. Retirement is final and the folder follows the store,
so nothing else is needed: the restarted publisher's recovery removes what the store retired
before it died, then takes the lock, and the sampler goes on.

The kernel drops the lock when its holder dies, so a crash frees it at once. The file stays after
a clean stop too (the folder stays as published, for readers, so its objects must stay). Where no
file exists (the FUSE view, whose supervisor removes a leftover one: :func:`forget`; a sampler
started without the folder-view marker does too: :func:`at_sampler_start`) nothing changes. A
publisher that never comes back must not stop eviction for good (the cache would stay full and
sampling paused): after :data:`GONE_AFTER` seconds without one, :func:`may_release` lets the
sampler go on, with an error in its log; the folder then may show missing files until a
publisher starts and recovers it, never other bytes: a key evicted meanwhile is not fetched again
until then (:mod:`.heldback`), as its object's path is the one the old links name.
"""

from __future__ import annotations

import fcntl
import logging
import os
import time
from pathlib import Path

from epochfs.sidecar.store import flocks

log = logging.getLogger("epochfs.store")

LOCK_NAME = "publisher.lock"
"""The lock file in the cache folder; it holds the holder's pid (for a person looking)."""

GONE_AFTER = 60.0
"""Seconds without a publisher after which the sampler retires and evicts again. Above the
supervisor's longest restart backoff (30 s) plus a start under load, so a publisher that keeps
crashing and coming back keeps its folder whole; bounded, so one that never comes back (a
publisher stopped for good, or the cache moved to the FUSE view outside a supervisor) costs at most
this much of a full cache's sampling."""

HOLD_TRIES = 100
"""Tries, 10 ms apart, to take the lock: :func:`may_release` holds it shared for a moment."""

_free_since: dict[str, float] = {}
"""Per cache folder, in this process: when :func:`may_release` first found the lock free."""
_gave_up: set[str] = set()


def hold(root: Path) -> int | None:
    """Take the publisher lock of the cache ``root`` for the life of the process; its descriptor,
    or None (with a warning) when another publisher holds it: that one keeps the folder's
    epochs' objects, and a second publisher of the same cache changes nothing in that until the
    first stops (then :func:`try_hold`, at its next step, takes it)."""
    fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    kept = False
    try:  # any failure closes it: a descriptor left open would hold the lock against the next try
        for _ in range(HOLD_TRIES):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                time.sleep(0.01)  # a look by may_release, which holds it shared for microseconds
                continue
            kept = True
            _write_pid(fd, root)
            return fd
        holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
    finally:
        if not kept:
            os.close(fd)
    log.warning("another publisher (pid %s) holds %s: this one does not", holder, root / LOCK_NAME)
    return None


def try_hold(root: Path) -> int | None:
    """One try, without waiting or a warning, at the publisher lock of the cache ``root``: its
    descriptor, or None while another holds it. A publisher refused by :func:`hold` (another
    publisher of the same cache, into another folder) calls it at each step, so it takes the lock
    as soon as that one stops: else the sampler, finding the lock free, would stall for
    :data:`GONE_AFTER` seconds and then evict without a publisher while this one runs. A refusal
    by :func:`may_release`'s shared look is retried at the next step."""
    fd = os.open(root / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    _write_pid(fd, root)
    return fd


def _write_pid(fd: int, root: Path) -> None:
    """The holder's pid in the file, best effort: the lock is the ``flock``, not the content, so a
    full cache volume (``ENOSPC`` from the write) does not stop a publisher from taking it."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as e:
        log.info("could not write the pid into %s (%s): the lock holds all the same", root / LOCK_NAME,
                 os.strerror(e.errno) if e.errno else e)


def state(root: Path) -> bool | None:
    """None: the cache has no publisher lock (the FUSE view); True: a publisher holds it; False:
    the cache has a folder view and no publisher runs now."""
    return flocks.holder(root / LOCK_NAME)


def may_release(root: Path, *, now: float | None = None) -> bool:
    """Whether the sampler may retire epochs and evict objects of the cache ``root`` now: yes
    without a publisher lock or while a publisher holds it, no while none does, for at most
    :data:`GONE_AFTER` seconds (``now``: a :func:`time.monotonic` reading). Says so in the log
    when that changes (a warning when it starts waiting, an error when it stops waiting, a line
    when the publisher is back)."""
    key = str(root)
    held = state(root)
    if held is None or held:
        if _free_since.pop(key, None) is not None:
            log.info("the folder view's publisher runs again: epochs retire and objects are evicted again")
            _gave_up.discard(key)
        return True
    now = time.monotonic() if now is None else now
    if key not in _free_since:
        _free_since[key] = now
        log.warning("the folder view's publisher is not running (%s is free): no epoch retires and no "
                    "object is evicted until it is back and has taken retired epochs' folders down, so "
                    "every file the folder shows stays readable (at most %.0fs)", root / LOCK_NAME,
                    GONE_AFTER)
    since = _free_since[key]
    if now - since < GONE_AFTER:
        return False
    if key not in _gave_up:
        _gave_up.add(key)
        log.error("the folder view's publisher has not run for %.0fs: retiring epochs and evicting "
                  "objects without it; the folder may show missing files until a publisher starts "
                  "and recovers it (evicted keys are not fetched again until then)", now - since)
    return True


def gave_up(root: Path) -> bool:
    """Whether :func:`may_release`, in this process, has stopped waiting for the cache's absent
    publisher: retired epochs' folders may then still be shown, so what is evicted is held back
    from a fetch (:mod:`.heldback`) until a publisher is back."""
    return str(root) in _gave_up


VIEW_ENV = "EPOCHFS_VIEW"
"""The marker a sampler reads at its start: ``folder`` where a folder view's publisher serves this
cache (``epochfs sidecar --view folder`` sets it for its sampler child; set it for an ``epochfs
sample`` run beside a standalone ``epochfs publish``). Anything else: no folder view is configured,
and the sampler removes a lock nobody holds (:func:`at_sampler_start`)."""


def at_sampler_start(root: Path) -> None:
    """A sampler starting without the folder-view marker (:data:`VIEW_ENV`) forgets a leftover
    lock nobody holds: the lock matters only while a folder view is configured for the cache,
    else a cache that once had one would hold retirement and eviction back for
    :data:`GONE_AFTER` seconds, then log an error about a folder view that does not exist, in
    every new sampler process."""
    if os.environ.get(VIEW_ENV, "").strip().lower() != "folder":
        forget(root)


def forget(root: Path) -> bool:
    """Remove the cache's publisher lock unless a publisher holds it (the cache is used with the
    FUSE view now: nothing must wait for a publisher); True when one was removed."""
    try:
        if state(root) is not False:
            return False
        (root / LOCK_NAME).unlink()
    except FileNotFoundError:
        return False
    except OSError as e:  # the sampler then waits at most GONE_AFTER, and says so
        log.warning("could not remove %s: %s", root / LOCK_NAME, e)
        return False
    log.info("removed %s: the cache is used with the FUSE view", root / LOCK_NAME)
    return True
