"""Why the webhook refuses a pod: the checks :func:`.mutate.decide` runs before it writes a patch.

A module of their own so that each refusal reads with its reason and its way out, apart from the
patch. Each check raises :class:`Refused` with the message the API server shows the user;
:func:`.mutate.decide` turns it into a refused decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from epochfs.sidecar.webhook.fields import CONTAINERS, FIELD_PATH_RE, JSON, SHARD_ENV, SHARD_INDEX
from epochfs.sidecar.webhook.profiles import Profile


class Refused(Exception):
    """The pod asked for epochfs but cannot be served as it is; the message says why and what to do."""


def as_map(obj: Any, what: str) -> dict[str, Any]:
    """``obj``, a field of the pod that must be an object (absent: empty)."""
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise Refused(f"{what} is not an object")
    return obj


def as_list(obj: Any, what: str) -> list[Any]:
    """``obj``, a field of the pod that must be a list of objects (absent: empty)."""
    if obj is None:
        return []
    if not isinstance(obj, list) or not all(isinstance(x, dict) for x in obj):
        raise Refused(f"{what} is not a list of objects")
    return obj


def check_shard(meta: Mapping[str, Any], profile: Profile, sidecars: list[JSON]) -> None:
    """The shard the sidecar will read from the pod's metadata must be there, and in range."""
    for c in sidecars:
        for e in c.get("env", []):
            if e["name"] != SHARD_ENV or "valueFrom" not in e:
                continue
            path = e["valueFrom"].get("fieldRef", {}).get("fieldPath", "")
            m = FIELD_PATH_RE.match(path)
            if not m:
                continue
            source = as_map(meta.get(m.group(1)), f"metadata.{m.group(1)}")
            value = source.get(m.group(2))
            if value is None:
                raise Refused(
                    f"profile {profile.name} has nodes={profile.nodes}: the shard comes from {path}, "
                    f"which this pod does not have (the Indexed Job's pods have it); set {SHARD_INDEX} "
                    "to a number or a field path of this pod"
                )
            if not (str(value).isascii() and str(value).isdigit()) or int(value) >= profile.nodes:
                raise Refused(
                    f"the shard of this pod, {path} = {value!r}, is not one of "
                    f"0..{profile.nodes - 1} (profile {profile.name} has nodes={profile.nodes})"
                )


def check_security(spec: Mapping[str, Any], profile: Profile, pss_enforced: bool) -> None:
    """Refuse a pod that could not run the profile's sidecar, with the reason and the way out."""
    os_name = as_map(spec.get("os"), "spec.os").get("name")
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
    security = as_map(spec.get("securityContext"), "spec.securityContext")
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


def targets(annotations: Mapping[str, Any], containers: list[JSON]) -> list[int]:
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


def check_conflicts(
    profile: Profile,
    containers: list[JSON],
    init_containers: list[JSON],
    all_names: set[Any],
    volume_names: set[Any],
    chosen: list[int],
    sidecars: list[JSON],
    own_volumes: list[JSON],
    trainer_env: list[JSON],
    trainer_mounts: list[JSON],
) -> None:
    """Nothing epochfs adds may clash with what the pod has: a container or volume of the same
    name, the sidecar's health port, a variable the trainer's containers (``chosen``, indexes of
    ``containers``) set themselves, a mount where epochfs mounts its view or cache."""
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
        for p in as_list(c.get("ports"), f"container {c.get('name')} ports"):
            if port is not None and p.get("containerPort") == port:
                raise Refused(
                    f"container {c.get('name')!r} declares port {port}, the epochfs sidecar's "
                    "(sidecar.healthPort of the profile); containers of a pod share its ports"
                )
    env_names = {e["name"] for e in trainer_env}
    mount_paths = {m["mountPath"].rstrip("/") for m in trainer_mounts}
    for i in chosen:
        c = containers[i]
        cname = c.get("name")
        for e in as_list(c.get("env"), f"container {cname} env"):
            if e.get("name") in env_names:
                raise Refused(
                    f"container {cname!r} sets {e.get('name')} itself; epochfs sets it "
                    f"(remove it, or leave the container out with {CONTAINERS})"
                )
        for m in as_list(c.get("volumeMounts"), f"container {cname} volumeMounts"):
            if str(m.get("mountPath", "")).rstrip("/") in mount_paths:
                raise Refused(
                    f"container {cname!r} mounts something at {m.get('mountPath')}, where "
                    "epochfs mounts its view or cache"
                )
