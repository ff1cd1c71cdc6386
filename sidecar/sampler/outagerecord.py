"""The sampler's outage of the remote, told where the supervisor and status read it.

Why: an outage mid-run is no exit (the breaker keeps the keys and pauses), so only the sampler
knows it. Its breaker reports each pause and the end (:class:`~.breaker.OutageChange`); this
records them in the index (:data:`~epochfs.sidecar.store.Meta.OUTAGE`, the format of
:mod:`epochfs.sidecar.store.outage`), which ``/readyz``, ``/healthz``, ``status.json`` and
``epochfs status`` read whatever the log level, and in the ``epochfs_remote_outage{cause}``
gauge. The index is written at a pause (at most every 2 s at an outage's start, every 60 s as it
lasts) and at the end only, never per failure.

A run killed with -9 mid-outage leaves its record: :class:`OutageRecord` removes it when the next
run starts (this run records its own when it pauses), as the loop does with its backpressure.
"""

from __future__ import annotations

import logging
import os
import time

from epochfs.sidecar.metrics_sampler import outage_gauges
from epochfs.sidecar.redact import redact
from epochfs.sidecar.sampler.breaker import OutageChange
from epochfs.sidecar.sampler.diskspace import is_disk_full
from epochfs.sidecar.store import Meta, Store
from epochfs.sidecar.store.outage import Outage, cap_error

log = logging.getLogger("epochfs.sampler")


class OutageRecord:
    """The breaker's ``on_change``: records the outage in the index and in the gauge. Used from
    the sampler's loop thread only (the breaker's)."""

    def __init__(self, store: Store) -> None:
        """Remove the outage a run killed mid-outage left in the index: this run has met none."""
        self.store = store
        self._since: tuple[str, float] | None = None
        """The cause of the outage now and when it began (wall clock), kept across its pauses."""
        left = store.meta(Meta.OUTAGE)
        if left is not None:
            log.info("clearing the remote outage the last run left in the index: this run "
                     "records its own if the remote is down")
            self._write(None)

    def __call__(self, change: OutageChange) -> None:
        """A pause of an outage (its cause, the objects failed in a row, the error) or its end."""
        outage_gauges().show(change.cause)  # (made at the first outage: see OutageGauges)
        if change.cause is None:
            self._since = None
            self._write(None)
            return
        if self._since is None or self._since[0] != change.cause:
            self._since = (change.cause, time.time())
        outage = Outage(cause=change.cause, since=round(self._since[1], 3), objects=change.objects,
                        error=cap_error(redact(change.error)), pid=os.getpid())
        self._write(outage.to_json())

    def _write(self, value: str | None) -> None:
        """Write the record (None: remove it). A full volume refuses it: the gauge still says so,
        and the next pause or the end writes again; any other failure is the index's, raised as
        the loop's other writes raise it."""
        try:
            self.store.set_meta(Meta.OUTAGE, value)
        except Exception as e:
            if not is_disk_full(e):
                raise
            log.warning("recording the remote outage in the index: %s (the volume is full; written "
                        "at the next pause or the outage's end)", e)


__all__ = ["OutageRecord"]
