"""A stop during the start's listing requests: the remote closed, so a request blocked on a store
that accepted the connection and never answers ends at once.

The start reads its first listing pages on the main thread (the discovery: S3's first page and
its folders), in a blocking read that only ``--read-timeout`` ends (up to an hour), while the
pod's termination grace is seconds: a SIGTERM then waited for the read and the kubelet killed
the sampler. Closing the remote shuts its sockets down (:meth:`.GetPool.close`), so the read
fails at once and the caller, seeing the stop set, ends cleanly. Only around the start: once
the sampler fetches, a stop lets downloads in flight finish within its grace instead."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from epochfs.sidecar.remote import Remote
from epochfs.sidecar.remote.stoplook import stopped_first


@contextlib.contextmanager
def closed_on_stop(remote: Remote, stop: threading.Event) -> Iterator[None]:
    """Close ``remote`` should ``stop`` be set before the block ends (from a watcher thread,
    joined when the block ends)."""
    done = threading.Event()

    def watch() -> None:
        if stopped_first(done, stop):
            remote.close()

    watcher = threading.Thread(target=watch, name="start-stop", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()


__all__ = ["closed_on_stop"]
