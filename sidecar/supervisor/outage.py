"""The remote's outage while the sampler runs, and its cause, as the supervisor shows them.

Why: a remote that goes down mid-run, or refuses the credentials (S3's ``InvalidAccessKeyId``
after a rotated Secret, an expired session token), is no exit of the sampler: its outage breaker
keeps the keys and pauses. An operator sent to ``/readyz`` or ``epochfs status`` by
``EpochfsSamplerStalled`` must see the cause, and the one that matters most (credentials refused:
nothing mends it but new credentials) must not be the hardest to find.

The sampler records the outage in the index (:mod:`epochfs.sidecar.store.outage`, written at each
pause of its breaker and removed when the remote answers again and at its start), and the
supervisor's loop reads it from there at each tick, as it reads the backpressure, and the probes
take the loop's last reading (:func:`shown`). A record counts only while the
sampler that wrote it runs (its pid the running child's): a run killed with -9 mid-outage leaves
its record until the next run's start removes it, and meanwhile it is no outage of the sampler
running now. Its words go where the sampler's retry goes: ``/readyz`` (``outage``,
``outage_cause``; its ``reason`` while not ready), ``/healthz``'s sampler entry, and the
supervisor's state (``sampler_retrying`` of ``status.json`` and of ``epochfs status``).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from epochfs.sidecar.store import Meta, Store
from epochfs.sidecar.store.outage import Outage, parse

if TYPE_CHECKING:
    from epochfs.sidecar.supervisor.children import Child

log = logging.getLogger("epochfs.supervisor")

REWRITE_EVERY = 30.0
"""Seconds between two writes of an ongoing outage into the supervisor's state: its readers take a
state older than 90 s for one a dead supervisor left
(:data:`~epochfs.sidecar.store.stats.RETRYING_MAX_AGE`)."""


def running_outage(store: Store | None, sampler: Child) -> Outage | None:
    """The outage the running sampler recorded, read from the index by the supervisor's loop at
    each tick; None when there is none, the sampler does not run, the record is another run's, or
    the index cannot be read now."""
    if store is None or not sampler.alive:
        return None
    try:
        outage = parse(store.meta(Meta.OUTAGE))
    except Exception as e:  # the index busy or damaged: the sampler's business, not the loop's
        log.debug("reading the remote outage: %s", e)
        return None
    return shown(outage, sampler)


def shown(outage: Outage | None, sampler: Child) -> Outage | None:
    """``outage`` (the loop's last reading) if it is still the running sampler's. The probes ask
    this, never the index: ``/healthz`` is liveness, and must not wait on an index that another
    writer holds."""
    pid = sampler.pid
    if outage is None or pid is None or outage.pid != pid or not sampler.alive:
        return None
    return outage


def outage_state(outage: Outage) -> dict[str, Any]:
    """The supervisor's state document's ``sampler`` part: ``waiting`` with no retry times, which
    its readers render as the words alone (:func:`~epochfs.sidecar.store.stats.retry_words`)."""
    return {"waiting": outage.words, "outage": outage.cause, "retry": None, "next_start": None,
            "started": None}


def state_key(outage: Outage) -> tuple[str, int]:
    """What changes when the state must be written again: the words, and every
    :data:`REWRITE_EVERY` seconds while they stay."""
    return outage.words, int(time.monotonic() // REWRITE_EVERY)


__all__ = ["REWRITE_EVERY", "outage_state", "running_outage", "shown", "state_key"]
