"""The folder view (``--view folder``): the FUSE view's layout written as plain files on a volume.

Why: the FUSE view needs a privileged sidecar in Kubernetes (only privileged containers may use
Bidirectional mount propagation), which Restricted clusters refuse. The epoch entries are symlinks
into a read-only view of the cache anyway, so the same tree can be *published* into a folder of a
volume shared with the trainer, and nothing needs a mount or a privilege (docs/folderview.md).

This module is ``epochfs publish``, the process: :func:`run_publish` recovers the folder and keeps
it equal to the store until a signal, pausing on a full volume. The parts, one concern each:
:mod:`.folderview_publisher` (:class:`FolderPublisher`: what one step writes, recovery after a
kill, retirement), :mod:`.folderview_ahead` (the next epoch built ahead, so a cut is shown by a
rename), :mod:`.folderview_body` (its manifest body, joined ahead), :mod:`.folderview_links` (trees
of links on disk), :mod:`.folderview_remove` (removing retired trees in the background),
:mod:`.folderview_lost` (lost samples' placeholders and record), :mod:`.folderview_grace` (each
shown epoch pinned for the in-use window, a refused record tried again) and
:mod:`.folderview_wake` (a cut wakes the publisher) and :mod:`.folderview_lock` (one publisher per
folder; the cache's publisher lock taken when the one holding it stops).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from epochfs.sidecar.folderview_lock import CacheLock, FolderLock
from epochfs.sidecar.folderview_publisher import (
    CONTROL_TEMP_PREFIX,
    DIR_MODE,
    FILE_MODE,
    FULL_ERRNOS,
    TEMP_PREFIX,
    FolderPublisher,
)
from epochfs.sidecar.folderview_remove import remove_tree
from epochfs.sidecar.folderview_reports import Recovery, Step
from epochfs.sidecar.folderview_wake import CutWatch
from epochfs.sidecar.signals import set_from_handler
from epochfs.sidecar.store import Meta, Store, object_name
from epochfs.sidecar.store.reader import FolderReader

log = logging.getLogger("epochfs.folderview")

INLINE_LINK_BYTES = 59
"""The longest symlink target ext4 keeps in the inode; a longer one takes a data block (4 KiB)."""


__all__ = ["CONTROL_TEMP_PREFIX", "DIR_MODE", "FILE_MODE", "TEMP_PREFIX", "FolderPublisher", "Recovery",
           "Step", "check_target_length", "default_link_root", "remove_tree", "run_publish"]


def default_link_root(store: Store, link_root: Path | None) -> Path:
    """The link root: as given (absolute), else the cache's own objects folder (writable)."""
    if link_root is None:
        log.warning("no --link-root: epoch entries point into %s, which the sidecar can write; "
                    "give readers a read-only mount of it and pass its path as --link-root",
                    store.objects_dir)
        return store.objects_dir.absolute()
    if not link_root.is_absolute():
        raise ValueError(f"--link-root: {link_root} must be an absolute path")
    return link_root


def check_target_length(link_root: Path) -> int:
    """The length of the entries' targets; warns when ext4 would give each its own 4 KiB block."""
    length = len(f"{link_root}/{object_name('0' * 32)}".encode())
    if length > INLINE_LINK_BYTES:
        log.warning("epoch entries' targets are %d bytes (link root %s): on ext4 each one longer than %d "
                    "bytes takes a 4 KiB block of the folder's volume; a link root of at most %d bytes "
                    "keeps them in their inodes", length, link_root, INLINE_LINK_BYTES,
                    INLINE_LINK_BYTES - (length - len(str(link_root).encode())))
    return length


def run_publish(*, cache: Path, folder: Path, link_root: Path | None = None, interval: float = 0.1,
                ahead: bool = True) -> int:
    """``epochfs publish``: keep ``folder`` equal to the view of ``cache`` until SIGTERM/SIGINT.

    The store is looked at when a cut replaces the cache's ``epochs.hwm`` (:mod:`.folderview_wake`)
    and at least every ``interval`` seconds (one small query when nothing changed), so a cut,
    whoever made it, is published at once. No signal wakes it: one sent in the moment before the
    interpreter installs its handlers would kill it. A signal lets a build in
    progress finish; the folder is left as it is on exit: readers keep reading, and the next start
    recovers from it.

    From the end of its first recovery to its exit it holds the cache's publisher lock
    (:mod:`~epochfs.sidecar.store.publisherlock`): while no publisher holds it the sampler retires
    and evicts nothing, so a publisher that died leaves no shown file without its object, and the
    one that comes back has taken the retired epochs' folders down before the sampler goes on.
    Another publisher of the cache (into another folder) holding it, this one takes it at the first
    step after that one stopped. Before its first recovery it takes the folder's lock
    (:mod:`.folderview_lock`): a second publisher of the same folder is refused (exit 2), as its
    recovery would remove the first one's trees in progress.
    """
    stop = threading.Event()

    def on_stop(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        set_from_handler(stop, then=lambda: log.info("%s: stopping", name))

    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, on_stop)
    folder = Path(os.path.abspath(folder))
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--mount: {folder} exists and is not a folder")
    with Store(cache) as store:
        publisher = FolderPublisher(store=store, folder=folder, link_root=default_link_root(store, link_root),
                                    ahead=ahead)
        check_target_length(publisher.view.link_root)
        log.info("publishing %s into %s (links into %s)", cache, folder, publisher.view.link_root)
        watch = CutWatch(store.root)
        folder_lock, cache_lock = FolderLock(folder), CacheLock(store.root)
        try:
            # Without inotify the watch cannot wait: the stop's wait is the poll then.
            _publish_until(stop, publisher, interval=interval, watch=watch if watch.fd >= 0 else None,
                           before_recover=folder_lock.take, on_recovered=cache_lock.take,
                           on_step=cache_lock.retry)
        finally:
            watch.close()
            publisher.close()
            cache_lock.close()  # after close: the folder stays as published, its objects too
            folder_lock.close()
    log.info("stopped; %s left as published", folder)
    return 0


PAUSED_RETRY = 2.0
"""Seconds between tries to publish while the folder's volume is full."""


def _publish_until(stop: threading.Event, publisher: FolderPublisher, *, interval: float,
                   watch: CutWatch | None = None, on_recovered: Callable[[], None] | None = None,
                   before_recover: Callable[[], None] | None = None,
                   on_step: Callable[[], None] | None = None) -> None:
    """Recover the folder, then step every ``interval`` seconds, or as soon as ``watch`` sees a
    cut, until ``stop`` (noticed within ``interval``). A full volume
    pauses publishing instead of ending the process (a crash loop restarted every 30 s, its
    /healthz failing, while nothing could be written anyway): what is published stays readable
    (every write is temp + rename, and a failed build removes its temp), the reason goes to the
    log once and to the index (status, /v1/cut, the metrics), and each try every
    :data:`PAUSED_RETRY` seconds either publishes (room came back: resumed by itself) or
    fails the same way again. ``on_recovered`` is called once, after the first recovery that
    succeeded (the publisher lock is taken then: a full volume there is the cache's);
    ``before_recover`` before each try to recover (the folder's lock: a refusal ends the loop);
    ``on_step`` after each step (the cache's lock tried again while another holds it). A live epoch
    whose name a user's folder holds (:attr:`FolderPublisher.blocked`) is recorded the same way."""
    recovered = False
    paused: str | None = None
    # Not what the index holds: a publisher killed while paused left its reason there, which the
    # first step's record replaces (recorded only on change, it would stay for good).
    recorded: object = _UNRECORDED
    while True:
        busy = False
        volume = "the folder view's volume"
        try:
            if not recovered:
                if before_recover is not None:
                    before_recover()
                publisher.recover()
                if on_recovered is not None:
                    volume = "the cache volume"  # the lock file is in the cache
                    on_recovered()  # a failure (a full cache volume) recovers again at the next try
                    volume = "the folder view's volume"
                recovered = True
                busy = publisher.step(force_status=True).pending
            else:
                busy = publisher.step(force_status=paused is not None).pending
            if on_step is not None:
                on_step()
            if paused is not None:
                log.info("publishing resumed: the volume has room again")
                paused = None
        except OSError as e:
            if e.errno not in FULL_ERRNOS:
                raise
            where = _full_path(e, publisher.folder, cache=volume != "the folder view's volume")
            reason = f"{volume} is full ({os.strerror(e.errno)}: {where})"
            if paused is None:
                log.error("%s: publishing paused; what is published stays readable; trying again every "
                          "%.0fs", reason, PAUSED_RETRY)
            paused = reason
        now = paused or publisher.blocked
        if now != recorded:
            _record_pause(publisher.store, now)
            recorded = now
        if paused is not None or busy or watch is None:
            if stop.wait(PAUSED_RETRY if paused is not None else 0.001 if busy else interval):
                return
        else:
            watch.wait(interval)
            if stop.is_set():
                return


_UNRECORDED = object()
"""What :func:`_publish_until` has recorded of its pause before its first record: nothing."""


def _full_path(e: OSError, folder: Path, *, cache: bool) -> str:
    """The path on the full volume that a failed call names: ``symlink(target, link)`` names the
    target (a cache object) first and the link second, ``rename`` its source first; so the first of
    them in the view's folder, else the folder itself. For the cache volume, the first named."""
    names = [str(f) for f in (e.filename, e.filename2) if f is not None]
    if cache:
        return names[0] if names else str(folder)
    inside = [f for f in names if os.path.isabs(f) and (f == str(folder) or f.startswith(f"{folder}/"))]
    return inside[0] if inside else str(folder)


def _record_pause(store: FolderReader, reason: str | None) -> None:
    """Write (or clear) the pause's reason in the index; a failure to is logged, not raised (the
    index may be on the full volume too)."""
    try:
        store.set_meta(Meta.PUBLISH_PAUSED, reason)
    except Exception as e:
        log.warning("could not record the publisher's pause in the index: %s", e)

