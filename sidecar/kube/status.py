"""The status annotation's content: a small JSON summary of the cache on the pod.

Its own module because what the annotation says (stable keys, no timestamps, so that an unchanged
cache costs no API call) is a contract with whoever reads ``kubectl get pod -o yaml``, apart from
how often :class:`~.sender.KubeReporter` sends it.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

STATUS_ANNOTATION = "epochfs.io/status"


def status_summary(stats: Mapping[str, Any]) -> dict[str, Any]:
    """The annotation's content from ``Store.stats().to_json()``: small, stable keys, no timestamps
    (so an unchanged cache costs no API call)."""
    cap = int(stats.get("capacity_bytes") or 0)
    used = int(stats.get("cache_bytes") or 0)
    return {
        "latestEpoch": stats.get("latest_epoch"),
        "samples": int(stats.get("samples") or 0),
        "cacheBytes": used,
        "capacityBytes": cap,
        "occupancy": round(used / cap, 3) if cap else 0.0,
        "backpressure": bool(stats.get("backpressure")),
        "backpressureReason": stats.get("backpressure_reason"),
    }



def annotation_patch(summary: Mapping[str, Any], updated: dt.datetime) -> dict[str, Any]:
    """The pod merge patch that sets the annotation to ``summary`` stamped ``updated``."""
    value = json.dumps({**summary, "updated": updated.strftime("%Y-%m-%dT%H:%M:%SZ")},
                       sort_keys=True, separators=(",", ":"))
    return {"metadata": {"annotations": {STATUS_ANNOTATION: value}}}
