"""The chart's ``remote.url`` accepts every scheme the sidecar's registry serves, and refuses what
the registry refuses, derived from the registry itself so that a new backend cannot be forgotten
in values.schema.json: ``az://`` was served by the sidecar and the image's webhook, yet every
``helm install`` with it failed the schema's pattern, which named s3, gs and gcs only.

For every scheme of ``registry.SCHEMES``, a set of URL shapes is judged by the sidecar's own start-up
check (``registry.check_url``) and the admission webhook's (``overrides.url_problem``, what no
sidecar in a pod could list); the chart's pattern must give the same verdict on each, and the real
helm renders the first accepted one into the sidecar's environment and refuses the first refused
one by the schema.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from helm_helpers import CHART, RELEASE, helm

from epochfs.sidecar.remote.registry import SCHEMES, backend_for, check_url
from epochfs.sidecar.webhook.overrides import url_problem

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
URL_SCHEMA = SCHEMA["properties"]["remote"]["properties"]["url"]

SHAPES = (
    "{}://bucket/train",
    "{}://bucket",
    "{}://localhost/data",
    "{}://bucket@account.example/train",
    "{}:///data/train",
    "{}://",
    "{}://my bucket/train",
    "{}://bucket/run#1/x",
)
"""URL shapes of every scheme: with a bucket, container or host, with credentials or an account's
host after ``@``, with an absolute path alone, empty, with a space in the name, with ``#`` in the
path. Each scheme's backend accepts some and refuses others."""


def registry_verdict(url: str) -> str | None:
    """Why the sidecar (its start-up check) or the webhook (what a pod's sidecar cannot list)
    refuses ``url``, or None where both accept it."""
    scheme = url.split("://", 1)[0]
    try:
        check_url(url)
    except ValueError as e:
        return str(e)
    return url_problem(url, scheme)


def chart_accepts(url: str) -> bool:
    return jsonschema.Draft7Validator(URL_SCHEMA).is_valid(url)


def test_the_registry_serves_az() -> None:
    """The case that was broken: az:// and its spellings are in the registry the chart follows."""
    assert {"az", "abfs", "abfss"} <= set(SCHEMES)
    assert all(backend_for(s) is not None for s in SCHEMES)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_chart_pattern_gives_the_registry_verdict(scheme: str) -> None:
    """The schema's pattern accepts a URL of ``scheme`` exactly where the sidecar and the webhook
    do, over every shape; and at least one shape of every scheme is accepted (a scheme the chart
    left out fails here, whatever the shapes)."""
    urls = [shape.format(spelled) for shape in SHAPES for spelled in (scheme, scheme.upper())]
    disagree = {url: (registry_verdict(url), chart_accepts(url)) for url in urls
                if (registry_verdict(url) is None) != chart_accepts(url)}
    assert not disagree, disagree
    assert any(registry_verdict(url) is None for url in urls), urls


def _render_url(helm_bin: Path, tmp_path: Path, url: str, *, check: bool = True) -> tuple[int, str, str]:
    # A file:// remote is a folder the sidecar mounts (the chart refuses one no mount holds): every
    # file:// shape's path is under /data.
    values: dict[str, Any] = {"remote": {"url": url}}
    if url.lower().startswith("file:"):
        values["sidecar"] = {"extraVolumes": [{"name": "data", "emptyDir": {}}],
                             "extraVolumeMounts": [{"name": "data", "mountPath": "/data"}]}
    proc = helm(helm_bin, "template", RELEASE, str(CHART), "--show-only", "templates/job.yaml",
                values=values, tmp=tmp_path, check=check)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("scheme", SCHEMES)
def test_helm_renders_every_scheme_of_the_registry(helm_bin: Path, tmp_path: Path, scheme: str) -> None:
    """The real helm: the first shape the registry accepts renders into the sidecar's
    EPOCHFS_REMOTE; the first it refuses fails the schema's check of remote.url."""
    urls = [shape.format(spelled) for shape in SHAPES for spelled in (scheme, scheme.upper())]
    good = next(url for url in urls if registry_verdict(url) is None)
    bad = next(url for url in urls if registry_verdict(url) is not None)
    _, stdout, _ = _render_url(helm_bin, tmp_path, good)
    job = yaml.safe_load(stdout)
    side = job["spec"]["template"]["spec"]["initContainers"][0]
    assert {"name": "EPOCHFS_REMOTE", "value": good} in side["env"]
    rc, _, stderr = _render_url(helm_bin, tmp_path, bad, check=False)
    assert rc != 0 and "schema" in stderr.lower() and "/remote/url" in stderr, (bad, stderr)
