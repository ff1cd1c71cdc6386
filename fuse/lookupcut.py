"""A cut asked for by a lookup of ``epoch-N`` (the trainer's ``stat``), and the wait it reports.

Apart from :mod:`.view`, which answers lookups: this is the one place the FUSE server writes an
epoch into the store, and the one wait of a cut it reports (``epochfs_cut_wait_seconds``).
"""

from __future__ import annotations

import time

from epochfs.fuse.metrics import fuse_metrics
from epochfs.sidecar.store import EpochReader


def request_cut(store: EpochReader, n: int) -> bool:
    """Ask ``store`` to cut ``n`` for a lookup; True when it is live now.

    A cut this lookup made is a wait to report: the sampler reports only the queued cuts it
    makes itself, so a trainer's ``stat epoch-N`` that cut at once, or whose poll cut the epoch
    an earlier lookup had queued, would go uncounted. The wait is the time since the request was
    queued (by an earlier lookup or ``POST /v1/cut``), else the lookup's own time, as
    ``epochfs.sidecar.cutrequest`` reports its cuts. A cut found made (another rank's lookup, the
    sampler's) is theirs to report."""
    asked = time.monotonic()
    queued = dict(store.pending_cuts()).get(n)  # read first: the cut removes the row
    live, made = store.request_cut_made(n)
    if made:
        waited = time.time() - queued if queued is not None else time.monotonic() - asked
        fuse_metrics().cut_waited(waited)
    return live


__all__ = ["request_cut"]
