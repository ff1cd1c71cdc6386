"""What the webhook does to one pod: mutate it (with a JSONPatch), skip it, or refuse it.

Pure: a pod (the AdmissionReview's object, a dict) and the profiles in, a :class:`Decision` out.

The pod's metadata says what it wants:

* ``epochfs.io/inject: "true"`` (an annotation or a label) asks for epochfs; ``"false"`` (either)
  declines, the annotation winning over the label. The chart's matchCondition
  (``epochfs.webhook.injectCondition``) reads it the same way, so the API server sends only the
  pods that ask (and those with another value, refused here).
* ``epochfs.io/profile``: a profile of the chart's ``webhook.profiles`` (default: ``default``).
* ``epochfs.io/remote``, ``epochfs.io/capacity``: the sidecar's ``EPOCHFS_REMOTE`` and
  ``EPOCHFS_CAPACITY`` instead of the profile's.
* ``epochfs.io/shard-index``: the pod's shard, a number or a downward-API field path such as
  ``metadata.labels['training.kubeflow.org/replica-index']`` (default: the profile's, which is the
  Indexed Job's completion index for nodes > 1 and 0 for one node).
* ``epochfs.io/containers``: the containers that get the trainer's mounts and environment,
  comma-separated (default: every container of ``spec.containers``).

The patch adds, as the chart's Job has them: the sidecar first in ``initContainers``, the volumes,
the trainer's environment first in each target container's ``env`` (so its own variables may refer
to ``$(EPOCHFS_MOUNT)``) and its mounts, the pod security context's fields the pod does not set,
the scrape annotations the pod does not have, the marker ``epochfs.io/injected: <profile>``, and
the profile's pod labels (``epochfs.io/injected-by: <the webhook>``: the chart's PodMonitor of
injected pods selects it; set even where the pod has it, so the monitor finds every injected pod).
A pod with the marker, or holding the sidecar and its volume already (attached by the
templates), is left alone: a pod mutated twice is unchanged.

A pod that sets ``spec.automountServiceAccountToken: false`` gets no API token from epochfs
either: the projected token volume (``epochfs-kube-api-access``) and its mount are left out and
the sidecar runs with ``EPOCHFS_KUBE_REPORTING=0`` (no Events, no status), whatever the
profile's kubeReporting says. ``epochfs.io/capacity`` may take at most 90% of the profile's cache
volume, the share the chart gives the sidecar.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from epochfs.sidecar.confparse import parse_size
from epochfs.sidecar.remote.registry import SCHEMES as REMOTE_SCHEMES
from epochfs.sidecar.remote.registry import missing_library
from epochfs.sidecar.webhook.profiles import Profile

INJECT = "epochfs.io/inject"
PROFILE = "epochfs.io/profile"
REMOTE = "epochfs.io/remote"
CAPACITY = "epochfs.io/capacity"
SHARD_INDEX = "epochfs.io/shard-index"
CONTAINERS = "epochfs.io/containers"
INJECTED = "epochfs.io/injected"
ANNOTATIONS = (INJECT, PROFILE, REMOTE, CAPACITY, SHARD_INDEX, CONTAINERS)

SHARD_ENV = "EPOCHFS_SHARD_INDEX"
CAPACITY_SHARE_TENTHS = 9
"""The share of the cache volume a capacity may take: the chart's (epochfs.capacity, _helpers.tpl)."""
KUBE_API_VOLUME = "epochfs-kube-api-access"
KUBE_REPORTING_ENV = "EPOCHFS_KUBE_REPORTING"
KUBE_REPORTING_DETAIL_ENV = ("EPOCHFS_KUBE_STATUS_INTERVAL", "EPOCHFS_KUBE_ERROR_THRESHOLD")
_FIELD_RE = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")

Result = Literal["mutated", "skipped", "refused"]
JSON = dict[str, Any]


@dataclass(frozen=True)
class Decision:
    result: Result
    message: str
    patch: list[JSON] = field(default_factory=list)
    profile: str | None = None


class Refused(Exception):
    """The pod asked for epochfs but cannot be served as it is; the message says why and what to do."""


def _pointer(*parts: str | int) -> str:
    """An RFC 6901 JSON pointer."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _map(obj: Any, what: str) -> dict[str, Any]:
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise Refused(f"{what} is not an object")
    return obj


def _list(obj: Any, what: str) -> list[Any]:
    if obj is None:
        return []
    if not isinstance(obj, list) or not all(isinstance(x, dict) for x in obj):
        raise Refused(f"{what} is not a list of objects")
    return obj


def decide(pod: Any, profiles: Mapping[str, Profile], *, pss_enforced: bool = False) -> Decision:
    """The decision for one pod being created. ``pss_enforced``: its namespace enforces the Pod
    Security level baseline or restricted (the chart routes such namespaces to another path)."""
    try:
        return _decide(pod, profiles, pss_enforced)
    except Refused as e:
        return Decision("refused", f"epochfs: {e}")


def _decide(pod: Any, profiles: Mapping[str, Profile], pss_enforced: bool) -> Decision:
    if not isinstance(pod, dict):
        raise Refused("the object is not a pod")
    meta = _map(pod.get("metadata"), "metadata")
    labels = _map(meta.get("labels"), "metadata.labels")
    annotations = _map(meta.get("annotations"), "metadata.annotations")

    wanted = annotations.get(INJECT, labels.get(INJECT))
    if wanted is None or wanted == "false":
        return Decision("skipped", f'{INJECT} is not "true"')
    if wanted != "true":
        raise Refused(f'{INJECT}: {wanted!r} is neither "true" nor "false"')
    if INJECTED in annotations:
        return Decision(
            "skipped",
            f"already injected (profile {annotations[INJECTED]})",
            profile=str(annotations[INJECTED]),
        )

    spec = _map(pod.get("spec"), "spec")
    containers = _list(spec.get("containers"), "spec.containers")
    init_containers = _list(spec.get("initContainers"), "spec.initContainers")
    volumes = _list(spec.get("volumes"), "spec.volumes")
    all_names = {
        c.get("name")
        for c in containers
        + init_containers
        + _list(spec.get("ephemeralContainers"), "spec.ephemeralContainers")
    }
    volume_names = {v.get("name") for v in volumes}

    name = annotations.get(PROFILE, "default")
    profile = profiles.get(name)
    if profile is None:
        raise Refused(
            f"{PROFILE}: no profile {name!r} (the chart's webhook.profiles has: "
            f"{', '.join(sorted(profiles))})"
        )
    sidecars = copy.deepcopy(profile.sidecar_containers)
    own_volumes = copy.deepcopy(profile.volumes)
    if {c["name"] for c in sidecars} <= all_names and {v["name"] for v in own_volumes} <= volume_names:
        return Decision(
            "skipped", "already attached (the epochfs sidecar and its volumes are there)", profile=name
        )

    trainer_env = copy.deepcopy(profile.trainer_env)
    trainer_mounts = copy.deepcopy(profile.trainer_volume_mounts)
    no_token = spec.get("automountServiceAccountToken") is False
    if no_token:
        _without_kube_reporting(sidecars, own_volumes)
    _override(annotations, profile, sidecars, trainer_env)
    _check_shard(meta, profile, sidecars)
    _check_security(spec, profile, pss_enforced)

    targets = _targets(annotations, containers)
    for c in sidecars:
        if c["name"] in all_names:
            raise Refused(
                f"the pod already has a container named {c['name']!r} (the epochfs sidecar's name); rename it"
            )
    for v in own_volumes:
        if v["name"] in volume_names:
            raise Refused(
                f"the pod already has a volume named {v['name']!r}, which epochfs adds; "
                "rename it (names starting with epochfs- are epochfs')"
            )
    port = profile.health_port
    for c in containers + init_containers:
        for p in _list(c.get("ports"), f"container {c.get('name')} ports"):
            if port is not None and p.get("containerPort") == port:
                raise Refused(
                    f"container {c.get('name')!r} declares port {port}, the epochfs sidecar's "
                    "(sidecar.healthPort of the profile); containers of a pod share its ports"
                )
    env_names = {e["name"] for e in trainer_env}
    mount_paths = {m["mountPath"].rstrip("/") for m in trainer_mounts}
    for i in targets:
        c = containers[i]
        cname = c.get("name")
        for e in _list(c.get("env"), f"container {cname} env"):
            if e.get("name") in env_names:
                raise Refused(
                    f"container {cname!r} sets {e.get('name')} itself; epochfs sets it "
                    f"(remove it, or leave the container out with {CONTAINERS})"
                )
        for m in _list(c.get("volumeMounts"), f"container {cname} volumeMounts"):
            if str(m.get("mountPath", "")).rstrip("/") in mount_paths:
                raise Refused(
                    f"container {cname!r} mounts something at {m.get('mountPath')}, where "
                    "epochfs mounts its view or cache"
                )

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

    new_annotations = {INJECTED: name}
    new_annotations.update({k: v for k, v in profile.pod_annotations.items() if k not in annotations})
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
    for i in targets:
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
    security = _map(spec.get("securityContext"), "spec.securityContext")
    missing = {k: v for k, v in profile.pod_security_context.items() if k not in security}
    if spec.get("securityContext") is None:
        if missing:
            add("/spec/securityContext", missing)
    else:
        for k, v in missing.items():
            add(_pointer("spec", "securityContext", k), v)
    targets_text = ", ".join(str(containers[i].get("name")) for i in targets)
    no_report = " without kube reporting (automountServiceAccountToken: false)" if no_token else ""
    return Decision(
        "mutated",
        f"epochfs profile {name} injected{no_report} (trainer containers: {targets_text})",
        patch,
        profile=name,
    )


def _override(
    annotations: Mapping[str, Any], profile: Profile, sidecars: list[JSON], trainer_env: list[JSON]
) -> None:
    """The annotations' remote, capacity and shard, in the sidecar's (and trainer's) environment."""
    values: dict[str, JSON] = {}
    remote = annotations.get(REMOTE)
    if remote is not None:
        url = str(remote).strip()
        scheme = url.split("://", 1)[0].lower() if "://" in url else ""
        if scheme not in REMOTE_SCHEMES:
            raise Refused(
                f"{REMOTE}: {remote!r} is not a dataset URL ({', '.join(s + '://' for s in REMOTE_SCHEMES)})"
            )
        missing = missing_library(scheme)
        if missing is not None:  # the webhook runs in the sidecar's image: what it lacks, the sidecar does
            raise Refused(f"{REMOTE}: the epochfs image cannot serve {scheme}:// remotes "
                          f"(it lacks {missing})")
        values["EPOCHFS_REMOTE"] = {"name": "EPOCHFS_REMOTE", "value": url}
    capacity = annotations.get(CAPACITY)
    if capacity is not None:
        try:
            if str(capacity).strip().startswith("-"):
                raise ValueError("must not be negative")
            size = parse_size(str(capacity))
        except ValueError as e:
            raise Refused(f"{CAPACITY}: {e}") from None
        if size <= 0:
            raise Refused(f"{CAPACITY}: {capacity!r} must be positive")
        if profile.cache_volume_bytes is not None:
            limit = profile.cache_volume_bytes * CAPACITY_SHARE_TENTHS // 10
            if size > limit:
                raise Refused(
                    f"{CAPACITY}: {capacity} is more than the cache volume of profile "
                    f"{profile.name} allows: at most {limit} bytes, 90% of its "
                    f"{profile.cache_volume_bytes} (cache.volume.size), as the chart gives the "
                    "sidecar (the rest holds the index, its WAL and the downloads in flight; a full "
                    "volume gets the pod evicted); choose a profile with a bigger volume"
                )
        values["EPOCHFS_CAPACITY"] = {"name": "EPOCHFS_CAPACITY", "value": str(size)}
    shard = annotations.get(SHARD_INDEX)
    if shard is not None:
        text = str(shard).strip()
        if text.isdigit():
            if int(text) >= profile.nodes:
                raise Refused(
                    f"{SHARD_INDEX}: {text} is not one of 0..{profile.nodes - 1} "
                    f"(profile {profile.name} has nodes={profile.nodes})"
                )
            values[SHARD_ENV] = {"name": SHARD_ENV, "value": text}
        elif _FIELD_RE.match(text):
            values[SHARD_ENV] = {"name": SHARD_ENV, "valueFrom": {"fieldRef": {"fieldPath": text}}}
        else:
            raise Refused(
                f"{SHARD_INDEX}: {shard!r} is neither a number nor a field path like "
                "metadata.labels['training.kubeflow.org/replica-index']"
            )
    if not values:
        return
    for c in sidecars:
        env = c.get("env", [])
        found = set()
        for k, item in enumerate(env):
            if item["name"] in values:
                env[k] = values[item["name"]]
                found.add(item["name"])
        if set(values) - found:  # the chart's sidecar always sets these: a document out of step
            raise Refused(
                f"profile {profile.name}: the sidecar sets no {', '.join(sorted(set(values) - found))}"
            )
    if SHARD_ENV in values:
        for k, item in enumerate(trainer_env):
            if item["name"] == SHARD_ENV:
                trainer_env[k] = values[SHARD_ENV]


def _without_kube_reporting(sidecars: list[JSON], volumes: list[JSON]) -> None:
    """The pod sets automountServiceAccountToken: false: it holds no API token, and epochfs does
    not add one behind its back. The projected token volume, its mount and the reporting
    environment go; the sidecar runs with EPOCHFS_KUBE_REPORTING=0 (no Events or status)."""
    volumes[:] = [v for v in volumes if v.get("name") != KUBE_API_VOLUME]
    for c in sidecars:
        c["volumeMounts"] = [m for m in c.get("volumeMounts", []) if m.get("name") != KUBE_API_VOLUME]
        if not c["volumeMounts"]:
            del c["volumeMounts"]
        env = []
        for e in c.get("env", []):
            if e.get("name") in KUBE_REPORTING_DETAIL_ENV:
                continue
            if e.get("name") == KUBE_REPORTING_ENV:
                e = {"name": KUBE_REPORTING_ENV, "value": "0"}
            env.append(e)
        if "env" in c:
            c["env"] = env


def _check_shard(meta: Mapping[str, Any], profile: Profile, sidecars: list[JSON]) -> None:
    """The shard the sidecar will read from the pod's metadata must be there, and in range."""
    for c in sidecars:
        for e in c.get("env", []):
            if e["name"] != SHARD_ENV or "valueFrom" not in e:
                continue
            path = e["valueFrom"].get("fieldRef", {}).get("fieldPath", "")
            m = _FIELD_RE.match(path)
            if not m:
                continue
            source = _map(meta.get(m.group(1)), f"metadata.{m.group(1)}")
            value = source.get(m.group(2))
            if value is None:
                raise Refused(
                    f"profile {profile.name} has nodes={profile.nodes}: the shard comes from {path}, "
                    f"which this pod does not have (the Indexed Job's pods have it); set {SHARD_INDEX} "
                    "to a number or a field path of this pod"
                )
            if not str(value).isdigit() or int(value) >= profile.nodes:
                raise Refused(
                    f"the shard of this pod, {path} = {value!r}, is not one of "
                    f"0..{profile.nodes - 1} (profile {profile.name} has nodes={profile.nodes})"
                )


def _check_security(spec: Mapping[str, Any], profile: Profile, pss_enforced: bool) -> None:
    """Refuse a pod that could not run the profile's sidecar, with the reason and the way out."""
    os_name = _map(spec.get("os"), "spec.os").get("name")
    if os_name not in (None, "linux"):
        raise Refused(f"spec.os.name is {os_name!r}: the epochfs sidecar runs on Linux only")
    if not profile.privileged:
        return
    folder_hint = "use a profile with sidecar.view=folder (no privilege: it passes the Restricted level)"
    if pss_enforced:
        raise Refused(
            f"profile {profile.name} uses the FUSE view, whose sidecar is privileged, and this "
            "namespace enforces the Pod Security level baseline or restricted, which refuses "
            f"privileged containers: {folder_hint}, or run in a namespace that enforces "
            "privileged"
        )
    security = _map(spec.get("securityContext"), "spec.securityContext")
    if security.get("runAsNonRoot") is True:
        raise Refused(
            f"profile {profile.name} uses the FUSE view, whose sidecar runs as root (mounting "
            "FUSE for the trainer needs CAP_SYS_ADMIN), and the pod's securityContext sets "
            f"runAsNonRoot: true; set runAsNonRoot on the trainer container instead, or {folder_hint}"
        )
    if spec.get("hostUsers") is False:
        raise Refused(
            f"profile {profile.name} uses the FUSE view, whose sidecar is privileged, and the "
            f"pod sets hostUsers: false (a user namespace, which forbids privileged containers); "
            f"{folder_hint}"
        )


def _targets(annotations: Mapping[str, Any], containers: list[JSON]) -> list[int]:
    """Indexes of the containers that get the trainer's mounts and environment."""
    if not containers:
        raise Refused("the pod has no containers")
    names = [c.get("name") for c in containers]
    chosen = annotations.get(CONTAINERS)
    if chosen is None:
        return list(range(len(containers)))
    wanted = [n.strip() for n in str(chosen).split(",") if n.strip()]
    if not wanted:
        raise Refused(f"{CONTAINERS} names no container")
    unknown = [n for n in wanted if n not in names]
    if unknown:
        raise Refused(
            f"{CONTAINERS}: no container {', '.join(map(repr, unknown))} in the pod "
            f"(it has {', '.join(map(str, names))})"
        )
    return [i for i, n in enumerate(names) if n in wanted]
