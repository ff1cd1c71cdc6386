"""The admission webhook takes its schemes, and what it checks in a URL of each, from the sidecar's
registry (``registry.BACKENDS``), not from lists of its own: it had ("gs", "gcs", "az", "abfs",
"abfss") for a bucket's name and ("http", "https") for a port, so a backend added to the registry
was served by the sidecar but refused, or let through unchecked, by the webhook.

Served for real: the profiles the real helm renders, AdmissionReview v1 over HTTPS to the
webhook's server (in this process, so a backend added to the registry here is the one it reads).
A backend that does not exist yet is made as a copy of each real one under a new scheme; the
webhook must admit and refuse its URLs exactly as it does the original's.
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from helm_helpers import render
from test_webhook_server import Served, serve
from webhook_helpers import chart_values, job, job_pod, profile_documents, write_profiles

from epochfs.sidecar.remote import registry

SHAPES = (
    "{}://bucket/train",
    "{}://b_1/run#1?x",
    "{}://c@acct.example.net/p",
    "{}://h:8443/d",
    "{}:///data/train",
    "{}://localhost/data",
    "{}://",
    "{}:///train",
    "{}://my bucket/train",
    "{}://b#1/train",
    "{}://host:http/data",
    "{}://host:99999/data",
    "{}://data/train",
    "{}://bucket/tr\x00ain",
)
"""URL shapes that one backend or another accepts or refuses: a bucket, a container with its
account's host, a host with a port, an absolute path, nothing, a name with a space or a "#", a port
that is not one, a relative path, a control character."""


DATASET = {"extraVolumes": [{"name": "dataset", "persistentVolumeClaim": {"claimName": "data"}}],
           "extraVolumeMounts": [{"name": "dataset", "mountPath": "/data", "readOnly": True}]}
"""The profiles' sidecar mounts a dataset at /data: a folder remote there is served (one no mount
holds is refused, tests/webhook/test_webhook_refusals.py), the same for every folder backend."""


@pytest.fixture(scope="module")
def served(helm_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    values = chart_values({"sidecar": DATASET})
    docs = profile_documents(render(helm_bin, values, tmp_path_factory.mktemp("render")))
    profiles = write_profiles(docs, tmp_path_factory.mktemp("profiles"))
    yield from serve(profiles, tmp_path_factory.mktemp("tls"))


def verdict(served: Served, url: str) -> str | None:
    """The served webhook's answer to a pod whose annotation names ``url``: None where it admits the
    pod (and the sidecar is given ``url``), else its message."""
    pod = job_pod(job(annotations={"epochfs.io/remote": url}))
    response = served.client.review(pod)["response"]
    if not response["allowed"]:
        message: str = response["status"]["message"]
        assert message.startswith("epochfs: epochfs.io/remote: "), message
        return message
    patched: dict[str, Any] = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    [side] = patched["spec"]["initContainers"]
    assert {"name": "EPOCHFS_REMOTE", "value": url} in side["env"]
    return None


@pytest.mark.parametrize("scheme", registry.SCHEMES)
def test_every_scheme_of_the_registry_is_admitted_and_checked(served: Served, scheme: str) -> None:
    """Each scheme the registry serves: a URL of its shape is injected, one without the part its
    backend names (bucket, container, host, folder) is refused saying so."""
    backend = registry.backend_for(scheme)
    assert backend is not None
    good = registry.SHAPES[backend.names].format(scheme).replace("/path/to/folder", "/data/train")
    assert verdict(served, good) is None
    message = verdict(served, f"{scheme}://")
    assert message is not None and f"no {backend.names} (" in message, message


@pytest.mark.parametrize("original", registry.BACKENDS, ids=[b.schemes[0] for b in registry.BACKENDS])
def test_a_backend_added_to_the_registry_is_checked_as_its_kind(
    served: Served, monkeypatch: pytest.MonkeyPatch, original: registry.Backend
) -> None:
    """A copy of ``original`` under a new scheme, added to the registry: the webhook admits its
    URLs where it admits the original's and refuses them where it refuses those (a bucket's name,
    a port, a relative path), with no line of the webhook naming the new scheme."""
    old = original.schemes[0]
    new = f"x{old}"
    added = dataclasses.replace(original, schemes=(new,))
    monkeypatch.setattr(registry, "BACKENDS", (*registry.BACKENDS, added))
    differ = {}
    for shape in SHAPES:
        want, got = verdict(served, shape.format(old)), verdict(served, shape.format(new))
        if (want is None) != (got is None):
            differ[shape] = (want, got)
    assert not differ, differ
    assert any(verdict(served, shape.format(new)) is None for shape in SHAPES)
