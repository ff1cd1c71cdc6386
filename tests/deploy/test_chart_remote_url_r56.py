"""The chart explains the common ``remote.url`` mistakes in words, as the CLI does, not by a regex.

Why: the chart is the documented way in, and values.schema.json's pattern answered a store's
host:port in the bucket place, a scheme it does not serve (``s4://``), a scheme with one slash
or no scheme at all with its whole
300-character pattern, before the templates' own checks could run, where ``epochfs sample`` said
what was wrong and what to write instead. Real helm over the chart; the sidecar's own start-up check
(``registry.check_url``) or the webhook's confirms that each case is one they refuse.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from helm_helpers import CHART, RELEASE, helm

from epochfs.sidecar.remote.registry import check_url
from epochfs.sidecar.webhook.overrides import url_problem

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
URL_SCHEMA = SCHEMA["properties"]["remote"]["properties"]["url"]

MISTAKES = [
    ("s3://minio:9000/bkt", ["remote.endpointUrl", "http://minio:9000", '"minio:9000"',
                             "s3://BUCKET/PREFIX"]),
    ("gs://storage.local:4443/bkt/p", ["remote.endpointUrl", "gs://BUCKET/PREFIX"]),
    ("s3:/b/p", ["two slashes", "s3://b/p"]),
    ("S3:bkt/p", ["two slashes", "S3://bkt/p"]),
    ("file:/data/train", ["two slashes", "file:///data/train"]),
    ("bkt/p", ["has no scheme", "s3://BUCKET/PREFIX"]),
    ("/data/train", ["has no scheme", "file:///data/train"]),
    ("s4://bkt/p", ['unknown URL scheme "s4"', "s3://", "file://"]),
    ("ftp://host/data", ['unknown URL scheme "ftp"', "gs://"]),
    ("C:/data/train", ['unknown URL scheme "C"', "file://"]),
]


def refused(url: str) -> bool:
    """The sidecar's start-up check or the admission webhook's (what a pod's sidecar cannot list)
    refuses ``url``."""
    try:
        check_url(url)
    except ValueError:
        return True
    return url_problem(url, url.split("://", 1)[0]) is not None


@pytest.mark.parametrize(("url", "says"), MISTAKES)
def test_a_mistaken_remote_url_is_refused_in_words(helm_bin: Path, tmp_path: Path, url: str,
                                                   says: list[str]) -> None:
    assert refused(url), url  # the chart refuses only what no sidecar could list
    proc = helm(helm_bin, "template", RELEASE, str(CHART), "--show-only", "templates/job.yaml",
                values={"remote": {"url": url}}, tmp=tmp_path, check=False)
    assert proc.returncode != 0, proc.stdout
    assert "does not match pattern" not in proc.stderr, proc.stderr
    line = next(line for line in proc.stderr.splitlines() if "remote.url" in line)
    assert f'remote.url "{url}"' in line and all(s in line for s in says), line


@pytest.mark.parametrize("value", [42, True, ["s3://b/p"], {"url": "s3://b/p"}])
def test_the_schema_still_wants_a_string(value: object) -> None:
    assert not jsonschema.Draft7Validator(URL_SCHEMA).is_valid(value)
