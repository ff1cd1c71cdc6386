"""What the kubelet computes for a container before it starts it: environment, $(VAR) expansion,
downward API values, resource quantities. Pure functions, used by tests/container_pod.py.

Why by hand: the container test runs a pod that `helm template` rendered with docker, with no
kubelet; these are the few kubelet rules the chart's pods rely on (downward API shard index,
$(VAR) references, envFrom of a Secret), written to behave as the kubelet's code does
(pkg/kubelet/kubelet_pods.go, third_party/forked/golang/expansion), so a pod spec that works
here means what it would on a node.
"""

from __future__ import annotations

import math
import os
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_SUFFIXES = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
}


class PodError(RuntimeError):
    """The pod cannot run as written (what the API server or the kubelet would refuse)."""


@dataclass
class PodIdentity:
    """What the API server and the scheduler give a pod: the values the downward API exposes."""

    name: str
    namespace: str = "default"
    uid: str = field(default_factory=lambda: str(uuid.uuid4()))
    node_name: str = "node-0"
    ip: str = "127.0.0.1"  # every container runs on the host network: loopback is the pod's IP
    host_ip: str = "127.0.0.1"
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    hostname: str = ""


@dataclass
class PodObjects:
    """The API objects a pod may reference: Secrets and ConfigMaps (name -> key -> value) and the
    service account token a projected volume would carry."""

    secrets: dict[str, dict[str, str]] = field(default_factory=dict)
    config_maps: dict[str, dict[str, str]] = field(default_factory=dict)
    token: str = ""


def expand(text: str, mapping: dict[str, str]) -> str:
    """Kubernetes $(VAR) expansion: $(NAME) becomes its value when NAME is defined and stays as
    written otherwise; $$ is a literal $; any other $ is kept."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end == -1:  # incomplete reference: kept, scanning goes on after "$("
                    out.append("$(")
                    i += 2
                    continue
                name = text[i + 2:end]
                out.append(mapping.get(name, f"$({name})"))
                i = end + 1
                continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)


def quantity(value: str | int | float) -> float:
    """A resource quantity ("2Gi", "500m", "1.5", "1e3") as a number (bytes, cores)."""
    if isinstance(value, (int, float)):
        return float(value)
    m = re.fullmatch(r"([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)", value.strip())
    if not m or m[2] not in _SUFFIXES:
        raise PodError(f"not a resource quantity: {value!r}")
    return float(m[1]) * _SUFFIXES[m[2]]


_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_ref(path: str, identity: PodIdentity, spec: dict[str, Any]) -> str:
    """A downward API fieldRef value."""
    m = _SUBSCRIPT.match(path)
    if m:
        return (identity.labels if m[1] == "labels" else identity.annotations).get(m[2], "")
    simple = {
        "metadata.name": identity.name, "metadata.namespace": identity.namespace,
        "metadata.uid": identity.uid, "spec.nodeName": identity.node_name,
        "spec.serviceAccountName": str(spec.get("serviceAccountName", "default")),
        "status.podIP": identity.ip, "status.podIPs": identity.ip,
        "status.hostIP": identity.host_ip, "status.hostIPs": identity.host_ip,
    }
    if path in simple:
        return simple[path]
    if path in ("metadata.labels", "metadata.annotations"):
        items = identity.labels if path == "metadata.labels" else identity.annotations
        return "\n".join(f'{k}="{v}"' for k, v in sorted(items.items()))
    raise PodError(f"fieldRef {path!r} is not a downward API field")


def _node_capacity(resource: str) -> float:
    """What a container without a limit sees through resourceFieldRef: the node's allocatable."""
    if resource.endswith("cpu"):
        return float(os.cpu_count() or 1)
    if resource.endswith("memory"):
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    raise PodError(f"resourceFieldRef {resource!r} has no node default here")


def resource_field_ref(ref: dict[str, Any], container: dict[str, Any]) -> str:
    """A downward API resourceFieldRef value (rounded up in units of its divisor, like the kubelet)."""
    kind, _, name = ref["resource"].partition(".")
    value = (container.get("resources", {}).get(kind) or {}).get(name)
    if value is None and kind == "requests":
        value = (container.get("resources", {}).get("limits") or {}).get(name)
    amount = quantity(value) if value is not None else _node_capacity(ref["resource"])
    return str(math.ceil(amount / quantity(ref.get("divisor", "1"))))


def _key_ref(ref: dict[str, Any], source: dict[str, dict[str, str]], kind: str) -> str | None:
    data = source.get(ref["name"])
    if data is None or ref["key"] not in data:
        if ref.get("optional"):
            return None
        raise PodError(f"{kind} {ref['name']!r} has no key {ref['key']!r} (the pod would not start)")
    return data[ref["key"]]


def container_env(container: dict[str, Any], spec: dict[str, Any], identity: PodIdentity,
                  objects: PodObjects) -> dict[str, str]:
    """The container's environment as the kubelet builds it: envFrom first (invalid names
    skipped), then env in order, each value expanded against the variables defined before it."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        prefix = source.get("prefix", "")
        ref = source.get("secretRef") or source.get("configMapRef") or {}
        pool = objects.secrets if "secretRef" in source else objects.config_maps
        data = pool.get(ref.get("name", ""))
        if data is None:
            if ref.get("optional"):
                continue
            raise PodError(f"envFrom: {ref.get('name')!r} not found (the pod would not start)")
        for key, text in data.items():
            if ENV_NAME.match(prefix + key):
                env[prefix + key] = text
    for item in container.get("env", []):
        name = item["name"]
        if "valueFrom" not in item:
            env[name] = expand(str(item.get("value", "")), env)
            continue
        src = item["valueFrom"]
        value: str | None
        if "fieldRef" in src:
            value = field_ref(src["fieldRef"]["fieldPath"], identity, spec)
        elif "resourceFieldRef" in src:
            value = resource_field_ref(src["resourceFieldRef"], container)
        elif "secretKeyRef" in src:
            value = _key_ref(src["secretKeyRef"], objects.secrets, "Secret")
        elif "configMapKeyRef" in src:
            value = _key_ref(src["configMapKeyRef"], objects.config_maps, "ConfigMap")
        else:
            raise PodError(f"env {name}: unsupported valueFrom {sorted(src)}")
        if value is not None:
            env[name] = value
    return env
