"""The injection documents the chart renders (one per profile) and the webhook applies.

``helm/epochfs/templates/_webhook.tpl`` renders each from the attach templates into the ConfigMap
``<release>-epochfs-webhook-profiles``, key ``<profile>.json``, which the server's pod mounts as a
folder. A document (``apiVersion: epochfs.io/injection-v1``) holds:

* ``sidecarContainers``: ``epochfs.sidecarContainer`` (one native sidecar init container), whose
  port ``metrics`` the webhook injects as ``epochfs-metrics`` (:func:`with_own_port_name`);
* ``volumes``, ``trainerVolumeMounts``, ``trainerEnv``: ``epochfs.volumes``,
  ``epochfs.trainerVolumeMounts``, ``epochfs.trainerEnv``;
* ``podAnnotations``: ``epochfs.podAnnotations`` (the prometheus.io/* scrape annotations);
* ``podLabels``: ``epochfs.webhook.injectedLabels`` (``epochfs.io/injected-by: <the webhook>``,
  which the chart's PodMonitor of injected pods selects); absent from documents of older charts;
* ``podSecurityContext``: the chart's ``podSecurityContext`` (fsGroup: the trainer reads the cache);
* ``imagePullSecrets``: the chart's (the sidecar's image may be private), added to the pod's own;
  absent from documents of older charts;
* ``view`` (fuse or folder), ``privileged`` (the sidecar is: the FUSE view), ``nodes`` (the
  shard count), ``cacheVolumeBytes`` (the cache volume's size, "" for hostPath).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from epochfs.sidecar.webhook.fields import METRICS_PORT, TEMPLATE_METRICS_PORT

API_VERSION = "epochfs.io/injection-v1"
NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


PORT_USERS = ("startupProbe", "readinessProbe", "livenessProbe")
"""The sidecar's probes, which name its port (an httpGet or tcpSocket handler)."""


class ProfileError(ValueError):
    """An injection document the server cannot use (the server refuses to start with it)."""


JSON = dict[str, Any]


@dataclass(frozen=True)
class Profile:
    """One profile's injection document, checked."""

    name: str
    view: str
    privileged: bool
    nodes: int
    cache_volume_bytes: int | None
    sidecar_containers: list[JSON]
    volumes: list[JSON]
    trainer_volume_mounts: list[JSON]
    trainer_env: list[JSON]
    pod_annotations: dict[str, str] = field(default_factory=dict)
    pod_labels: dict[str, str] = field(default_factory=dict)
    pod_security_context: JSON = field(default_factory=dict)
    image_pull_secrets: list[JSON] = field(default_factory=list)

    @property
    def health_port(self) -> int | None:
        """The sidecar's port (``sidecar.healthPort``), which no other container may take."""
        for c in self.sidecar_containers:
            for p in c.get("ports", []):
                return int(p["containerPort"])
        return None

    @classmethod
    def from_document(cls, name: str, doc: Any) -> Profile:
        def fail(what: str) -> ProfileError:
            return ProfileError(f"profile {name}: {what}")

        if not isinstance(doc, dict):
            raise fail("not a JSON object")
        if doc.get("apiVersion") != API_VERSION:
            raise fail(
                f"apiVersion {doc.get('apiVersion')!r} is not {API_VERSION!r} (a chart of another "
                "version rendered it?)"
            )
        if doc.get("profile") != name:
            raise fail(f"the document names profile {doc.get('profile')!r}")

        def named_list(key: str, *, required: bool = True) -> list[JSON]:
            value = doc.get(key)
            if not isinstance(value, list) or not all(
                isinstance(v, dict) and isinstance(v.get("name"), str) for v in value
            ):
                raise fail(f"{key} is not a list of named objects")
            if required and not value:
                raise fail(f"{key} is empty")
            names = [v["name"] for v in value]
            if len(set(names)) != len(names) and key != "trainerVolumeMounts":
                raise fail(f"{key} repeats a name: {names}")
            return value

        containers = named_list("sidecarContainers")
        for c in containers:
            if c.get("restartPolicy") != "Always":
                raise fail(f"container {c['name']} is not a native sidecar (restartPolicy Always)")
        view = doc.get("view")
        if view not in ("fuse", "folder"):
            raise fail(f"view {view!r} is not fuse or folder")
        nodes = doc.get("nodes")
        if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 1:
            raise fail(f"nodes {nodes!r} is not a positive integer")
        size = doc.get("cacheVolumeBytes", "")
        plain = str(size).isascii() and str(size).isdigit()  # int() fails on "²", which isdigit() passes
        if not isinstance(size, (str, int)) or (size != "" and not plain):
            raise fail(f"cacheVolumeBytes {size!r} is not a number of bytes")
        annotations = doc.get("podAnnotations") or {}
        if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
            raise fail("podAnnotations is not a map of strings")
        labels = doc.get("podLabels") or {}
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise fail("podLabels is not a map of strings")
        security = doc.get("podSecurityContext") or {}
        if not isinstance(security, dict):
            raise fail("podSecurityContext is not an object")
        pull_secrets = named_list("imagePullSecrets", required=False) if "imagePullSecrets" in doc else []
        privileged = doc.get("privileged")
        if not isinstance(privileged, bool):
            raise fail("privileged is not a boolean")
        return cls(
            name=name,
            view=view,
            privileged=privileged,
            nodes=nodes,
            cache_volume_bytes=int(size) if size != "" else None,
            sidecar_containers=with_own_port_name(containers),
            volumes=named_list("volumes"),
            trainer_volume_mounts=named_list("trainerVolumeMounts"),
            trainer_env=named_list("trainerEnv"),
            pod_annotations=dict(annotations),
            pod_labels=dict(labels),
            pod_security_context=dict(security),
            image_pull_secrets=[{"name": s["name"]} for s in pull_secrets],
        )


def with_own_port_name(containers: list[JSON]) -> list[JSON]:
    """The sidecar containers (a copy) with their port ``metrics`` renamed ``epochfs-metrics``, and
    the probes that name it. The templates name the port ``metrics`` for the chart's own pods; a
    user's pod may have a container port named ``metrics`` too (KubeRay's workers do), and the
    PodMonitor of injected pods, which matches the port name in every container, would scrape it
    as epochfs'. Only the name changes: the number, and the prometheus.io/port annotation, stay."""
    containers = copy.deepcopy(containers)
    for c in containers:
        for p in c.get("ports") or []:
            if isinstance(p, dict) and p.get("name") == TEMPLATE_METRICS_PORT:
                p["name"] = METRICS_PORT
        handlers = [c.get(k) or {} for k in PORT_USERS]
        handlers += [h for h in (c.get("lifecycle") or {}).values() if isinstance(h, dict)]
        for handler in handlers:
            for action in (handler.get("httpGet"), handler.get("tcpSocket")):
                if isinstance(action, dict) and action.get("port") == TEMPLATE_METRICS_PORT:
                    action["port"] = METRICS_PORT
    return containers


def load_profiles(folder: Path) -> dict[str, Profile]:
    """Every ``<name>.json`` of ``folder`` (a mounted ConfigMap); ``default`` must be one."""
    profiles: dict[str, Profile] = {}
    try:
        paths = sorted(folder.glob("*.json"))
    except OSError as e:
        raise ProfileError(f"{folder}: {e}") from None
    for path in paths:
        name = path.stem
        if not NAME_RE.match(name):
            raise ProfileError(f"{path}: {name!r} is not a profile name (a DNS label)")
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise ProfileError(f"{path}: {e}") from None
        profiles[name] = Profile.from_document(name, doc)
    if "default" not in profiles:
        found = ", ".join(profiles) or "none"
        raise ProfileError(f"{folder}: no default.json (profiles found: {found})")
    return profiles


def profiles_from_documents(docs: Mapping[str, Any]) -> dict[str, Profile]:
    """Profiles from already parsed documents (name -> document), as the ConfigMap's data holds them."""
    return {name: Profile.from_document(name, doc) for name, doc in docs.items()}
