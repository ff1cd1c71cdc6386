"""``epochfs_cut_wait_seconds``'s buckets and help, for the three processes that observe it.

A cut waited for is reported by whoever made it: the sampler (the cuts of queued requests), the FUSE
server (a lookup of ``epoch-N`` that cut) and the supervisor (``POST /v1/cut``). ``/metrics`` shows
them as one family (:class:`~epochfs.sidecar.metrics_merge.MergedCollector` sums them), which holds
only while the three agree on help and buckets. Here, in the store, because the store is the one
package all three may import (the FUSE server imports nothing else of the sidecar: .importlinter),
and it is the store that says which call made a cut (:func:`.epochs.request_cut_made`).
"""

from __future__ import annotations

CUT_WAIT_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)
"""Upper bounds, in seconds: from a cut made at once (milliseconds) to one a request waited for."""
CUT_WAIT_HELP = ("Seconds from a cut request (lookup of epoch-N, POST /v1/cut) to the cut; a cut made "
                 "at once counts too, with the request's own time.")

__all__ = ["CUT_WAIT_BUCKETS", "CUT_WAIT_HELP"]
