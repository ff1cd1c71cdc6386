"""What the pod changes in the profile's sidecar: its annotations' remote, capacity and shard, and
no API token where the pod refuses one.

Apart from :mod:`.mutate` because each is a rewrite of the sidecar's (and trainer's) environment
with its own checks against the profile, done on copies before the patch is written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from epochfs.sidecar.confparse import parse_size
from epochfs.sidecar.redact import redact
from epochfs.sidecar.remote import registry
from epochfs.sidecar.remote.registry import backend_for, check_url, missing_library, named_part
from epochfs.sidecar.remote.urls import local_root
from epochfs.sidecar.webhook.fields import (
    CAPACITY,
    CAPACITY_SHARE_TENTHS,
    FIELD_PATH_RE,
    INDEX_ENV,
    JSON,
    KUBE_API_VOLUME,
    KUBE_REPORTING_DETAIL_ENV,
    KUBE_REPORTING_ENV,
    REMOTE,
    REMOTE_ENV,
    SHARD_ENV,
    SHARD_INDEX,
    cut,
    quoted,
)
from epochfs.sidecar.webhook.podchecks import Refused, shard_below
from epochfs.sidecar.webhook.profiles import Profile

MAX_SIZE_CHARS = 64
"""The longest capacity read: a size of bytes below 2**63 is a few characters (``1.5Ti``)."""
MIN_CAPACITY = 1024 * 1024
"""The smallest capacity admitted: below a MiB no dataset's objects fit, so a smaller budget is a
unit left out or mistyped (``15`` meant as 15Gi), and its sidecar would stop at once."""
EXAMPLES = "examples: 15Gi, 500G, 1.5Ti"


def _capacity(capacity: Any) -> int:
    """The bytes of an ``epochfs.io/capacity`` value, or :class:`Refused`. A number without a unit
    is refused, not read as bytes: ``100`` or ``15`` is a budget whose unit was left out, and as
    bytes it admits a pod whose sidecar refuses its settings and crash-loops (a size in bytes says
    so: ``2000000B``)."""
    text = str(capacity).strip()
    if len(text) > MAX_SIZE_CHARS:  # parse_size backtracks on long runs of digits
        raise Refused(f"{CAPACITY}: {quoted(capacity)} is not a size ({EXAMPLES})")
    try:
        if text.startswith("-"):
            raise ValueError("must not be negative")
        size = parse_size(text)
    except ValueError as e:
        raise Refused(f"{CAPACITY}: {e}") from None
    if size <= 0:
        raise Refused(f"{CAPACITY}: {quoted(capacity)} must be positive")
    if text[-1:].isdigit():
        raise Refused(f"{CAPACITY}: {quoted(capacity)} has no unit: write one ({EXAMPLES})")
    if size < MIN_CAPACITY:
        raise Refused(f"{CAPACITY}: {quoted(capacity)} is {size} bytes, less than the 1Mi a cache "
                      f"needs ({EXAMPLES})")
    return size


def override(
    annotations: Mapping[str, Any], profile: Profile, sidecars: list[JSON], trainer_env: list[JSON]
) -> None:
    """The annotations' remote, capacity and shard, in the sidecar's (and trainer's) environment."""
    values: dict[str, JSON] = {}
    remote = annotations.get(REMOTE)
    if remote is not None:
        url = str(remote).strip()
        scheme = url.split("://", 1)[0].lower() if "://" in url else ""
        if backend_for(scheme) is None:
            known = ", ".join(s + "://" for s in registry.SCHEMES)
            raise Refused(f"{REMOTE}: {quoted(remote)} is not a dataset URL ({known})")
        try:
            check_url(url)
        except ValueError as e:  # its message quotes the whole URL, redacted
            raise Refused(f"{REMOTE}: {str(e).replace(repr(redact(url)), quoted(redact(url)))}") from None
        problem = url_problem(url, scheme)
        if problem is not None:
            raise Refused(f"{REMOTE}: {quoted(remote)} is not a dataset URL: {problem}")
        missing = missing_library(scheme)
        if missing is not None:  # the webhook runs in the sidecar's image: what it lacks, the sidecar does
            raise Refused(f"{REMOTE}: the epochfs image cannot serve {scheme}:// remotes "
                          f"(it lacks {missing})")
        if (chosen := backend_for(scheme)) is not None and chosen.names == "folder":  # a local folder
            unheld = _folder_unmounted(url, sidecars)
            if unheld is not None:
                raise Refused(f"{REMOTE}: {quoted(remote)}: the sidecar reads {cut(unheld)} in its own "
                              "container, and no mount of the profile's sidecar holds it (the sidecar would "
                              "find no dataset and its pod would crash-loop); mount the dataset's "
                              "volume in the sidecar with the chart's sidecar.extraVolumes and "
                              "sidecar.extraVolumeMounts (docs/kubernetes.md, \"A dataset on a volume\")")
        values[REMOTE_ENV] = {"name": REMOTE_ENV, "value": url}
    capacity = annotations.get(CAPACITY)
    if capacity is not None:
        size = _capacity(capacity)
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
        if text.isascii() and text.isdigit():
            if not shard_below(text, profile.nodes):
                raise Refused(
                    f"{SHARD_INDEX}: {cut(text)} is not one of 0..{profile.nodes - 1} "
                    f"(profile {profile.name} has nodes={profile.nodes})"
                )
            values[SHARD_ENV] = {"name": SHARD_ENV, "value": text}
        elif FIELD_PATH_RE.match(text):
            values[SHARD_ENV] = {"name": SHARD_ENV, "valueFrom": {"fieldRef": {"fieldPath": text}}}
        else:
            raise Refused(
                f"{SHARD_INDEX}: {quoted(shard)} is neither a number nor a field path like "
                "metadata.labels['training.kubeflow.org/replica-index']"
            )
    if not values:
        return
    for c in sidecars:
        env = c.get("env", [])
        if REMOTE_ENV in values:
            _without_other_index(env, values[REMOTE_ENV]["value"])
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


_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")
"""A bucket's or a container's name (GCS, Azure; S3's own rule is in check_url): letters, digits,
dots, dashes, underscores (none allows a space, a slash, a colon or an ``@``)."""


def url_problem(url: str, scheme: str) -> str | None:
    """What makes ``url`` (of a known ``scheme``, passed by :func:`check_url`, which the sidecar
    runs at its start too) unusable as a pod's remote, or None: what check_url lets through but
    the sidecar cannot list, so the pod would be created only to fail its startup probe. Split as
    the remotes split it (:func:`~epochfs.sidecar.remote.urls.split_url`): "#" and "?" are legal in
    an object's key, so the bucket ends at the first "/" alone. Each check follows what the
    scheme's backend says its URLs name (:attr:`~epochfs.sidecar.remote.registry.Backend.names`),
    so a backend added to the registry is checked here without a line of this module."""
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        return "it holds a control character"
    backend = backend_for(scheme)
    names = backend.names if backend is not None else None
    if names == "bucket" or names == "container":
        name = named_part(url, names)  # a container's name ends at "@" (its account's host follows)
        if not _NAME_RE.match(name):
            return f"{quoted(name)} is not a bucket or container name (letters, digits, '.', '-' and '_')"
    elif names == "host":
        try:
            urlsplit(url).port  # noqa: B018 -- raises ValueError for a port not a number in range
        except ValueError as e:
            return cut(str(e))
    # A folder's relative path is the registry's own check (check_url, before this): one rule,
    # which reads file://LOCALHOST/ as the sidecar does.
    return None


def _folder_unmounted(url: str, sidecars: list[JSON]) -> str | None:
    """The folder of a ``file://`` remote when no volume mount of the sidecars is at it or above
    it (the container's own root filesystem is the epochfs image's: no dataset there); None when
    one holds it."""
    folder = "/" + local_root(url).strip("/")
    for c in sidecars:
        for m in c.get("volumeMounts", []):
            point = "/" + str(m.get("mountPath", "")).strip("/")
            if point == "/" or folder == point or folder.startswith(point + "/"):
                return None
    return folder


def _without_other_index(env: list[JSON], url: str) -> None:
    """The profile's index (``remote.indexUrl``) out of the sidecar's ``env`` when the pod's remote
    is another: the index lists the profile's dataset, whose keys the pod's remote does not hold
    (every fetch would miss, the sidecar would sample nothing). Without it the sidecar lists the
    pod's remote itself (an ``http(s)://`` remote: its ``<url>/index.txt``)."""
    if any(e["name"] == REMOTE_ENV and e.get("value") != url for e in env):
        env[:] = [e for e in env if e["name"] != INDEX_ENV]


def without_kube_reporting(sidecars: list[JSON], volumes: list[JSON]) -> None:
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
