"""What the webhook does to one pod: mutate it (with a JSONPatch), skip it, or refuse it.

Pure: a pod (the AdmissionReview's object, a dict) and the profiles in, a :class:`Decision` out.
This module decides and writes the patch; the refusals are :mod:`.podchecks`, the annotations'
rewrites of the sidecar's environment :mod:`.overrides`, the names :mod:`.fields`.

The pod's metadata says what it wants:

* ``epochfs.io/inject: "true"`` (an annotation or a label) asks for epochfs; ``"false"`` (either)
  declines, the annotation winning over the label. The chart's matchCondition
  (``epochfs.webhook.injectCondition``) reads it the same way, so the API server sends only the
  pods that ask (and those with another value, refused here).
* ``epochfs.io/profile``: a profile of the chart's ``webhook.profiles`` (default: ``default``).
* ``epochfs.io/remote``, ``epochfs.io/capacity``: the sidecar's ``EPOCHFS_REMOTE`` and
  ``EPOCHFS_CAPACITY`` instead of the profile's (a remote other than the profile's drops its
  ``EPOCHFS_INDEX``, which lists the profile's remote). A value over 2,048 characters is refused.
* ``epochfs.io/shard-index``: the pod's shard, a number or a downward-API field path such as
  ``metadata.labels['training.kubeflow.org/replica-index']`` (default: the profile's, which is the
  Indexed Job's completion index for nodes > 1 and 0 for one node).
* ``epochfs.io/containers``: the containers that get the trainer's mounts and environment,
  comma-separated (default: every container of ``spec.containers``).

Any other ``epochfs.io/*`` annotation (but those epochfs writes), and the options after
``epochfs.io/inject`` given as labels, are refused: ignored, a misspelled key would leave the pod
on the profile's dataset without a word. A pod whose containers are all of QoS class Guaranteed
gets a warning when the profile's sidecar makes it Burstable (:mod:`.qos`).

The patch adds, as the chart's Job has them: the sidecar first in ``initContainers`` (its port
named ``epochfs-metrics``, not ``metrics``: :func:`.profiles.with_own_port_name`), the volumes,
the trainer's environment first in each target container's ``env`` (so its own variables may refer
to ``$(EPOCHFS_MOUNT)``) and its mounts, the pod security context's fields the pod does not set,
the chart's ``imagePullSecrets`` the pod does not list (the sidecar's image may be private; the
Secrets must exist in the pod's namespace), the ``prometheus.io/*`` scrape annotations unless the
pod has one of its own (merged key by key they would point its discovery at another port or path:
the chart's PodMonitor of injected pods scrapes the sidecar then, and a warning says so), the
marker ``epochfs.io/injected: <profile>``, and the profile's pod labels
(``epochfs.io/injected-by: <the webhook>``: the chart's PodMonitor of injected pods selects it; set
even where the pod has it, so the monitor finds every injected pod).
A pod with the marker, or holding the sidecar and the volumes it shares with the trainer already
(attached by the templates, whose values may leave out the profile's optional volumes: the API
token's, the credentials'), is left alone: a pod mutated twice is unchanged.

A pod that sets ``spec.automountServiceAccountToken: false`` gets no API token from epochfs
either: the projected token volume (``epochfs-kube-api-access``) and its mount are left out and
the sidecar runs with ``EPOCHFS_KUBE_REPORTING=0`` (no Events, no status), whatever the
profile's kubeReporting says. ``epochfs.io/capacity`` may take at most 90% of the profile's cache
volume, the share the chart gives the sidecar.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from epochfs.sidecar.webhook.fields import INJECT, INJECTED, JSON, PROFILE, cut, cut_message, quoted
from epochfs.sidecar.webhook.overrides import override, without_kube_reporting
from epochfs.sidecar.webhook.podchecks import (
    Refused,
    as_list,
    as_map,
    check_conflicts,
    check_host_network,
    check_keys,
    check_lengths,
    check_security,
    check_shard,
    targets,
)
from epochfs.sidecar.webhook.profiles import Profile
from epochfs.sidecar.webhook.qos import qos_warning

Result = Literal["mutated", "skipped", "refused"]
SCRAPE_PREFIX = "prometheus.io/"
SCRAPE_WARNING = ("epochfs: the pod has prometheus.io/* annotations of its own, so epochfs adds none "
                  "(merged, they would scrape another port or path); the chart's PodMonitor of "
                  "injected pods scrapes the sidecar (port epochfs-metrics)")
"""Each warning at most 256 characters: the API server may cut a longer one."""


@dataclass(frozen=True)
class Decision:
    """What the server answers for one pod: the result, the message it logs (and, refused, the
    API server shows), the patch (mutated only), the profile asked for and the warnings the API
    server passes on to the client (kubectl prints them)."""

    result: Result
    message: str
    patch: list[JSON] = field(default_factory=list)
    profile: str | None = None
    warnings: tuple[str, ...] = ()


def _pointer(*parts: str | int) -> str:
    """An RFC 6901 JSON pointer."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def decide(pod: Any, profiles: Mapping[str, Profile], *, pss_enforced: bool = False) -> Decision:
    """The decision for one pod being created. ``pss_enforced``: its namespace enforces the Pod
    Security level baseline or restricted (the chart routes such namespaces to another path)."""
    try:
        return _decide(pod, profiles, pss_enforced)
    except Refused as e:
        return Decision("refused", cut_message(f"epochfs: {e}"))


def _decide(pod: Any, profiles: Mapping[str, Profile], pss_enforced: bool) -> Decision:
    if not isinstance(pod, dict):
        raise Refused("the object is not a pod")
    meta = as_map(pod.get("metadata"), "metadata")
    labels = as_map(meta.get("labels"), "metadata.labels")
    annotations = as_map(meta.get("annotations"), "metadata.annotations")

    wanted = annotations.get(INJECT, labels.get(INJECT))
    if wanted is None or wanted == "false":
        return Decision("skipped", f'{INJECT} is not "true"')
    if wanted != "true":
        raise Refused(f'{INJECT}: {quoted(wanted)} is neither "true" nor "false"')
    if INJECTED in annotations:
        return Decision(
            "skipped",
            f"already injected (profile {cut(str(annotations[INJECTED]))})",
            profile=cut(str(annotations[INJECTED])),
        )
    check_lengths(annotations)
    check_keys(annotations, labels, {k for p in profiles.values() for k in p.pod_annotations})

    spec = as_map(pod.get("spec"), "spec")
    containers = as_list(spec.get("containers"), "spec.containers")
    init_containers = as_list(spec.get("initContainers"), "spec.initContainers")
    volumes = as_list(spec.get("volumes"), "spec.volumes")
    all_names = {
        c.get("name")
        for c in containers
        + init_containers
        + as_list(spec.get("ephemeralContainers"), "spec.ephemeralContainers")
    }
    volume_names = {v.get("name") for v in volumes}

    name = annotations.get(PROFILE, "default")
    profile = profiles.get(name)
    if profile is None:
        raise Refused(
            f"{PROFILE}: no profile {quoted(name)} (the chart's webhook.profiles has: "
            f"{', '.join(sorted(profiles))})"
        )
    sidecars = copy.deepcopy(profile.sidecar_containers)
    own_volumes = copy.deepcopy(profile.volumes)
    shared = {m["name"] for m in profile.trainer_volume_mounts}  # the view's and the cache's
    if {c["name"] for c in sidecars} <= all_names and shared <= volume_names:
        return Decision(
            "skipped", "already attached (the epochfs sidecar and its volumes are there)", profile=name
        )

    trainer_env = copy.deepcopy(profile.trainer_env)
    trainer_mounts = copy.deepcopy(profile.trainer_volume_mounts)
    no_token = spec.get("automountServiceAccountToken") is False
    if no_token:
        without_kube_reporting(sidecars, own_volumes)
    override(annotations, profile, sidecars, trainer_env)
    check_shard(meta, profile, sidecars)
    check_security(spec, profile, pss_enforced)
    check_host_network(spec, profile)

    chosen = targets(annotations, containers)
    check_conflicts(profile, containers, init_containers, all_names, volume_names, chosen,
                    sidecars, own_volumes, trainer_env, trainer_mounts)

    patch: list[JSON] = []

    def add(path: str, value: Any) -> None:
        patch.append({"op": "add", "path": path, "value": value})

    def add_map(field: str, values: dict[str, str]) -> None:
        """``values`` into the pod's ``metadata.<field>``: the map whole where the pod has none
        (``/metadata`` made first where it has none either), else one key at a time."""
        if meta.get(field) is None:
            if "metadata" not in pod and not any(op["path"] == "/metadata" for op in patch):
                add("/metadata", {})
            add(f"/metadata/{field}", values)
        else:
            for k, v in values.items():
                add(_pointer("metadata", field, k), v)

    warnings = []
    scraped = any(isinstance(k, str) and k.startswith(SCRAPE_PREFIX) for k in annotations)
    new_annotations = {INJECTED: name}
    new_annotations.update({k: v for k, v in profile.pod_annotations.items()
                            if k not in annotations and not (scraped and k.startswith(SCRAPE_PREFIX))})
    if scraped and any(k.startswith(SCRAPE_PREFIX) for k in profile.pod_annotations):
        warnings.append(SCRAPE_WARNING)
    if (qos := qos_warning(spec, sidecars, name)) is not None:
        warnings.append(qos)
    add_map("annotations", new_annotations)
    if profile.pod_labels:
        add_map("labels", dict(profile.pod_labels))
    if spec.get("initContainers") is None:
        add("/spec/initContainers", sidecars)
    else:
        for i, c in enumerate(sidecars):  # first: the trainer's own init containers may read the view
            add(_pointer("spec", "initContainers", i), c)
    if spec.get("volumes") is None:
        add("/spec/volumes", own_volumes)
    else:
        for v in own_volumes:
            add("/spec/volumes/-", v)
    for i in chosen:
        c = containers[i]
        if c.get("env") is None:
            add(_pointer("spec", "containers", i, "env"), copy.deepcopy(trainer_env))
        else:
            for j, e in enumerate(trainer_env):
                add(_pointer("spec", "containers", i, "env", j), copy.deepcopy(e))
        if c.get("volumeMounts") is None:
            add(_pointer("spec", "containers", i, "volumeMounts"), copy.deepcopy(trainer_mounts))
        else:
            for m in trainer_mounts:
                add(_pointer("spec", "containers", i, "volumeMounts", "-"), copy.deepcopy(m))
    pulled = {s.get("name") for s in as_list(spec.get("imagePullSecrets"), "spec.imagePullSecrets")}
    pull_secrets = [dict(s) for s in profile.image_pull_secrets if s["name"] not in pulled]
    if spec.get("imagePullSecrets") is None:
        if pull_secrets:
            add("/spec/imagePullSecrets", pull_secrets)
    else:
        for s in pull_secrets:
            add("/spec/imagePullSecrets/-", s)
    security = as_map(spec.get("securityContext"), "spec.securityContext")
    missing = {k: v for k, v in profile.pod_security_context.items() if k not in security}
    if spec.get("securityContext") is None:
        if missing:
            add("/spec/securityContext", missing)
    else:
        for k, v in missing.items():
            add(_pointer("spec", "securityContext", k), v)
    targets_text = cut(", ".join(str(containers[i].get("name")) for i in chosen))
    no_report = " without kube reporting (automountServiceAccountToken: false)" if no_token else ""
    return Decision(
        "mutated",
        f"epochfs profile {name} injected{no_report} (trainer containers: {targets_text})",
        patch,
        profile=name,
        warnings=tuple(warnings),
    )
