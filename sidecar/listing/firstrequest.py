"""The start's first listing request of a remote that walks its folders (``gs://``, ``az://``;
nothing for the others): read at the start, so that a store refusing the listing ends the start
with the fix named, and given up at once on a stop."""

from __future__ import annotations

import logging
import random
import threading

from epochfs.sidecar.listing.retry import while_throttled
from epochfs.sidecar.remote import Remote, RemoteError
from epochfs.sidecar.remote.stoplook import stopped_first

log = logging.getLogger("epochfs.catalog")  # the listing's logger, as sources'


def first_request(remote: Remote, *, stop: threading.Event | None, rng: random.Random,
                  bounds: tuple[float, float]) -> None:
    """The first request of a remote's listing that is not read at the start otherwise
    (:meth:`~epochfs.sidecar.remote.base.Remote.probe`: a bucket walk's first page, an
    ``http(s)://`` index's first bytes; nothing for the others), read again while the store
    throttles it (``bounds``: the pause's first and longest bound): a refusal raises
    :class:`~epochfs.sidecar.remote.RemoteError` before the listing runs beside the sampler,
    which would try it again for ever.

    With ``stop``, the request runs on a thread of its own and a stop ends the wait at once
    (:class:`~epochfs.sidecar.remote.RemoteError`, which a stopping caller takes as a clean stop):
    a store that accepted the connection and never answers holds the request for the whole
    ``--read-timeout``, longer than a pod's termination grace, and the request itself cannot be
    cut short (gcsfs's and the Azure SDK's sockets are their own). The thread it leaves ends with
    the request's timeout, or with the process."""
    def probe() -> None:
        while_throttled(remote.probe, stop=stop, rng=rng, bounds=bounds, log=log,
                        what=f"listing {remote.url}")

    if stop is None:
        probe()
        return
    outcome: list[BaseException | None] = []
    done = threading.Event()

    def run() -> None:
        try:
            probe()
        except BaseException as e:  # handed to the waiting caller
            outcome.append(e)
        else:
            outcome.append(None)
        finally:
            done.set()

    threading.Thread(target=run, name="first-request", daemon=True).start()
    if stopped_first(done, stop):
        raise RemoteError(f"listing {remote.url}: stopped while its first request waited for an answer")
    if outcome[0] is not None:
        raise outcome[0]


__all__ = ["first_request"]
