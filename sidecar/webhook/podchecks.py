"""Why the webhook refuses a pod: the checks :func:`.mutate.decide` runs before it writes a patch.

A module of their own so that each refusal reads with its reason and its way out, apart from the
patch. Each check raises :class:`Refused` with the message the API server shows the user;
:func:`.mutate.decide` turns it into a refused decision.
"""

from __future__ import annotations

import difflib
import posixpath
from collections.abc import Collection, Mapping
from typing import Any

from epochfs.sidecar.config import SidecarSettings
from epochfs.sidecar.webhook.fields import (
    ANNOTATION_ONLY,
    ANNOTATIONS,
    CONTAINERS,
    FIELD_PATH_RE,
    INJECT,
    JSON,
    MAX_VALUE_CHARS,
    METRICS_PORT,
    PREFIX,
    SHARD_ENV,
    SHARD_INDEX,
    WRITTEN,
    cut,
    quoted,
)
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


def check_lengths(annotations: Mapping[str, Any]) -> None:
    """Refuse an ``epochfs.io/*`` annotation longer than :data:`MAX_VALUE_CHARS` before anything
    parses it: no value of epochfs is that long, and the cost of checking one that is should not
    hold up the other pods' reviews."""
    for key in ANNOTATIONS:
        value = annotations.get(key)
        if value is not None and len(text := str(value)) > MAX_VALUE_CHARS:
            raise Refused(f"{key}: {quoted(text)} is longer than the {MAX_VALUE_CHARS} characters "
                          "epochfs reads")


def check_keys(annotations: Mapping[str, Any], labels: Mapping[str, Any], written: Collection[str]) -> None:
    """Refuse an ``epochfs.io/*`` annotation epochfs does not read, and an option set as a label.

    Either would be ignored, and ignoring it is the worst answer: ``epochfs.io/remote-url`` or
    ``epochfs.io/profile`` as a label leaves the pod on the profile's dataset and view, and the
    trainer trains on another dataset without a word. ``written``: the ``epochfs.io/*``
    annotations of the profiles' documents, which epochfs writes itself (as :data:`WRITTEN`)."""
    for key in ANNOTATION_ONLY:
        if key in labels:
            raise Refused(f"{key} is a label of this pod, where epochfs does not read it: set it as an "
                          f"annotation (only {INJECT} works as a label too)")
    known = set(ANNOTATIONS)
    for key in annotations:
        if not isinstance(key, str) or not key.startswith(PREFIX) or key in known:
            continue
        if key in WRITTEN or key in written:
            continue
        near = difflib.get_close_matches(key, ANNOTATIONS, n=1) if len(key) <= 100 else []
        hint = f"did you mean {near[0]}? " if near else ""
        raise Refused(f"{cut(key)} is not an annotation epochfs reads ({hint}it reads "
                      f"{', '.join(ANNOTATIONS)}); a misspelled option would be ignored and the "
                      "pod run with the profile's value")


def shard_below(text: str, nodes: int) -> bool:
    """``text`` is a shard number (ASCII digits) below ``nodes``; decided without ``int()`` of a
    long run of digits (Python refuses to convert more than 4,300 of them)."""
    if not (text.isascii() and text.isdigit()):
        return False
    digits = text.lstrip("0") or "0"
    return len(digits) <= len(str(nodes)) and int(digits) < nodes


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
            if not shard_below(str(value), profile.nodes):
                raise Refused(
                    f"the shard of this pod, {path} = {quoted(value)}, is not one of "
                    f"0..{profile.nodes - 1} (profile {profile.name} has nodes={profile.nodes})"
                )


def check_security(spec: Mapping[str, Any], profile: Profile, pss_enforced: bool) -> None:
    """Refuse a pod that could not run the profile's sidecar, with the reason and the way out."""
    os_name = as_map(spec.get("os"), "spec.os").get("name")
    if os_name not in (None, "linux"):
        raise Refused(f"spec.os.name is {quoted(os_name)}: the epochfs sidecar runs on Linux only")
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
            f"{CONTAINERS}: no container {cut(', '.join(map(repr, unknown)))} in the pod "
            f"(it has {cut(', '.join(map(str, names)))})"
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
    name, the sidecar's health port (its number, or its name, which the PodMonitor of injected
    pods scrapes in every container), a variable the trainer's containers (``chosen``, indexes of
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
                    f"container {quoted(c.get('name'))} declares port {port}, the epochfs sidecar's "
                    "(sidecar.healthPort of the profile); containers of a pod share its ports"
                )
            if p.get("name") == METRICS_PORT:
                raise Refused(
                    f"container {quoted(c.get('name'))} declares a port named {METRICS_PORT!r}, the epochfs "
                    "sidecar's (the monitor of injected pods scrapes that name in every container); "
                    "rename it (names starting with epochfs- are epochfs')"
                )
    env_names = {e["name"] for e in trainer_env}
    for i in chosen:
        c = containers[i]
        cname = c.get("name")
        for e in as_list(c.get("env"), f"container {cname} env"):
            if e.get("name") in env_names:
                raise Refused(
                    f"container {quoted(cname)} sets {e.get('name')} itself; epochfs sets it "
                    f"(remove it, or leave the container out with {CONTAINERS})"
                )
        for m in as_list(c.get("volumeMounts"), f"container {cname} volumeMounts"):
            check_nesting(cname, m.get("mountPath"), trainer_mounts)


def _parts(path: str) -> tuple[str, ...]:
    """The components of an absolute path, ``.``, ``..`` and repeated slashes resolved as the
    container runtime resolves a mount point."""
    return tuple(p for p in posixpath.normpath("/" + path).split("/") if p)


def check_nesting(cname: Any, path: Any, trainer_mounts: list[JSON]) -> None:
    """A mount of the container at, under or above a path where epochfs mounts its view or cache
    is refused: the runtime makes a nested mount's mount point inside the outer volume. Under
    epochfs's, that is a read-only mount of the view or cache (the container fails to start) or
    a folder the FUSE view then hides; above, it writes a folder into the pod's own volume (and
    fails on a read-only one)."""
    if not isinstance(path, str) or not path:
        raise Refused(f"container {quoted(cname)} has a volumeMount without a mountPath")
    mine = _parts(path)
    for m in trainer_mounts:
        theirs = _parts(m["mountPath"])
        if mine == theirs:
            where = "at"
        elif mine[: len(theirs)] == theirs:
            where = "under"
        elif theirs[: len(mine)] == mine:
            where = "above"
        else:
            continue
        raise Refused(
            f"container {quoted(cname)} mounts something at {cut(path)}, {where} {m['mountPath']}, where "
            "epochfs mounts its view or cache (a mount nested with epochfs's needs its mount point "
            "made inside the other, read-only or hidden by the view); mount it elsewhere, or "
            "leave the container out with " + CONTAINERS
        )


DEFAULT_HEALTH_PORT: int = SidecarSettings.health_port
"""``--health-port``'s default, which the chart's ``sidecar.healthPort`` keeps: the port a pod on
the node's network is refused on."""


def check_host_network(spec: Mapping[str, Any], profile: Profile) -> None:
    """A pod on the node's network opens the sidecar's port on the node itself. On the chart's
    default port, 8080, that collides with whatever else on the node uses it (a second epochfs
    pod, a node agent), and the trainer's reports to 127.0.0.1:8080 reach whichever holds it: refused.
    A profile whose ``sidecar.healthPort`` is another port is a platform team's choice of a port
    kept for epochfs on its nodes (NCCL jobs on the host network need such pods): admitted."""
    port = profile.health_port
    if spec.get("hostNetwork") is True and port == DEFAULT_HEALTH_PORT:
        raise Refused(
            f"the pod sets hostNetwork: true, so the epochfs sidecar's port {port} "
            f"(sidecar.healthPort of profile {profile.name}) would be opened on the node itself, "
            f"where it collides with any other process or hostNetwork pod using port {port} "
            "(a second epochfs pod on that node could not start), and the trainer's reports to "
            f"127.0.0.1:{port} would reach whichever holds it; run the pod without hostNetwork, or "
            "choose (epochfs.io/profile) a profile whose sidecar.healthPort is a port kept for "
            "epochfs on the nodes"
        )
