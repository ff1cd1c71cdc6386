"""The metrics' import, made while the sampler's first LIST is on the wire.

Between the first LIST's answer and the first object GET the sampler makes its metrics: the
import of prometheus-client (and the http.server it pulls in, ~23 ms of CPU) lay on the main
thread's way to the first object GET. It cannot wait until after that GET (the downloader counts
the download as it starts), so a thread imports it while the main thread waits for the LIST's
answer, a wait that holds no GIL. Started only once the LIST is sent
(:meth:`~epochfs.sidecar.remote.s3.S3Remote.on_first_sent`), so nothing heavy is imported before
the first request; a remote that cannot say when starts it at once.

awscrt (the CRCs) is not preloaded: its functions are loaded straight from its shared library at
the first body's hash (:mod:`~epochfs.sidecar.store.crtcrc`, a millisecond or two), without the start of its
module (~55 ms of aws-lc entropy seeding with the GIL held), which an import beside the LIST had
taken from the main thread between the LIST's answer and the first object GET.
"""

from __future__ import annotations

import importlib
import logging
import threading

from epochfs.sidecar.remote import Remote

log = logging.getLogger("epochfs.sampler")

MODULES = ("prometheus_client",)
"""What the first download needs (its metrics) that nothing before the first LIST imports."""


def preload() -> None:
    """Import :data:`MODULES` on a daemon thread (a module another thread imports meanwhile waits
    for this one's import to finish, as Python's per-module import locks make it)."""
    try:
        threading.Thread(target=_import_all, name="preload", daemon=True).start()
    except RuntimeError as e:  # no thread to be had now: the sampler imports them itself, later
        log.debug("no preload thread: %s", e)


def _import_all() -> None:
    for name in MODULES:
        try:
            importlib.import_module(name)
        except ImportError as e:  # the sampler's own import of it says so, where it is needed
            log.debug("not preloaded: %s (%s)", name, e)


def preload_after_first_request(remote: Remote) -> None:
    """:func:`preload` once ``remote``'s first request is sent (:meth:`.Remote.on_first_sent`)."""
    remote.on_first_sent(preload)


__all__ = ["MODULES", "preload", "preload_after_first_request"]
