"""The pod's QoS class before and after the sidecar: a warning when injection drops Guaranteed.

Kubernetes gives a pod the Guaranteed class only when every container, init containers and
native sidecars included, has cpu and memory limits equal to its requests
(``pkg/apis/core/helper/qos``). The kubelet's static CPU manager, memory manager and topology
manager (a GPU trainer's exclusive cores, aligned on the GPUs' NUMA node) serve only Guaranteed
pods, and the kubelet evicts Burstable pods before Guaranteed ones. The chart's sidecar requests
less than its memory limit and sets no cpu limit, so it would turn such a pod Burstable. The
webhook does not change the profile's resources behind the user's back (a Guaranteed sidecar
holds whole cores of the node); it says so in the AdmissionResponse's ``warnings``, which kubectl
prints, and the profile's ``sidecar.resources`` keeps the class where that is wanted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from epochfs.sidecar.webhook.fields import JSON

QOS_RESOURCES = ("cpu", "memory")
"""The resources the QoS class is computed from."""

_QUANTITY_RE = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$")
_SUFFIXES = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def quantity(value: Any) -> Decimal | None:
    """A Kubernetes quantity (``500m``, ``16``, ``128Gi``, ``1e3``) as a number, or None for one
    it is not (the API server refuses those after admission: no class to compute)."""
    text = str(value).strip()
    if len(text) > 64:
        return None
    m = _QUANTITY_RE.match(text)
    if not m:
        return None
    try:
        number = Decimal(m.group(1))
    except InvalidOperation:
        return None
    suffix = m.group(2) or ""
    if suffix[:1] in ("e", "E"):
        return number.scaleb(int(suffix[1:]))
    return number * _SUFFIXES[suffix]


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _guaranteed(container: Mapping[str, Any]) -> bool:
    """Whether one container has cpu and memory limits equal to its requests (a request left out
    is its limit: the API server defaults it so)."""
    resources = container.get("resources")
    if not isinstance(resources, dict):
        return False
    limits = _map(resources.get("limits"))
    requests = _map(resources.get("requests"))
    for name in QOS_RESOURCES:
        limit = quantity(limits[name]) if name in limits else None
        if limit is None or limit == 0:
            return False
        request = quantity(requests[name]) if name in requests else limit
        if request != limit:
            return False
    return True


def qos_warning(spec: Mapping[str, Any], sidecars: list[JSON], profile: str) -> str | None:
    """The warning for a pod that the profile's ``sidecars`` turn from Guaranteed to Burstable,
    or None. A pod with pod-level ``spec.resources`` (Kubernetes 1.32 on) takes its class from
    those, which the sidecar does not change."""
    if spec.get("resources"):
        return None
    own = [
        c for key in ("containers", "initContainers") for c in (spec.get(key) or []) if isinstance(c, dict)
    ]
    if not own or not all(_guaranteed(c) for c in own):
        return None
    if all(_guaranteed(c) for c in sidecars):
        return None
    # At most 256 characters (with a 63-character profile name): the API server may cut a longer one.
    return (
        f"epochfs: the sidecar of profile {profile} makes this Guaranteed pod Burstable (QoS); to "
        "keep Guaranteed, give the profile's sidecar.resources limits equal to its requests (cpu, memory)"
    )
