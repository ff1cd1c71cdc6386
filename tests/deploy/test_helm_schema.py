"""values.schema.json: helm refuses wrong types and unknown keys before rendering anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from helm_helpers import CHART, RELEASE, helm, with_remote

SCHEMA = json.loads((CHART / "values.schema.json").read_text())


def test_schema_is_valid_and_accepts_the_default_values() -> None:
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    jsonschema.validate(values, SCHEMA)
    # Every key of values.yaml is declared (so additionalProperties: false rejects only typos).
    assert set(values) <= set(SCHEMA["properties"])


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"nodes": "four"}, "nodes"),
        ({"nodes": 0}, "nodes"),
        ({"sidecar": {"native": "yes"}}, "native"),
        ({"cache": {"volume": {"type": "nfs", "size": "10Gi"}}}, "type"),
        ({"cache": {"volume": {"type": "emptyDir", "size": "lots"}}}, "size"),
        # Malformed URLs of known schemes: every pod's sidecar would fail its startup probe.
        ({"remote": {"url": "s3://"}}, "url"),
        ({"remote": {"url": "s3:///train"}}, "url"),
        ({"remote": {"url": "gs://my bucket/train"}}, "url"),
        ({"remote": {"url": "https:///index"}}, "url"),
        ({"remote": {"url": "file://data/train"}}, "url"),
        ({"image": {"repository": "r", "digest": "latest"}}, "digest"),
        ({"sidecar": {"mountPath": "/"}}, "mountPath"),
        ({"sidecar": {"mountPath": "mnt/epochfs"}}, "mountPath"),
        ({"job": {"enabled": "no"}}, "enabled"),
        ({"job": {"labels": {"kueue.x-k8s.io/queue-name": 7}}}, "queue-name"),
        ({"job": {"labels": {"kueue.x-k8s.io/queue-name": "team a"}}}, "queue-name"),
        ({"job": {"annotations": {"owner": ["a"]}}}, "owner"),
        ({"commonLabels": {"team": "x" * 64}}, "team"),
        ({"commonLabels": {"bad key!": "x"}}, "bad key!"),
        ({"schedulerName": 5}, "schedulerName"),
        ({"trainer": {"image": {"repository": "x"}, "extraVolumes": [{"emptyDir": {}}]}}, "name"),
        ({"trainer": {"image": {"repository": "x"}, "extraVolumes": [{"name": "Bad_Name", "emptyDir": {}}]}},
         "name"),
        ({"trainer": {"image": {"repository": "x"}, "extraVolumeMounts": [{"name": "c"}]}}, "mountPath"),
        ({"trainer": {"image": {"repository": "x"},
                      "extraVolumeMounts": [{"name": "c", "mountPath": "ckpt"}]}}, "mountPath"),
        ({"cache": {"volume": {"type": "emptyDir", "size": "1Gi", "requestEphemeralStorage": "yes"}}},
         "requestEphemeralStorage"),
    ],
)
def test_helm_rejects_a_wrong_type_or_value(helm_bin: Path, tmp_path: Path, values: dict[str, Any],
                                            message: str) -> None:
    merged = with_remote(values) if "remote" not in values else values
    proc = helm(helm_bin, "template", RELEASE, str(CHART), values=merged, tmp=tmp_path, check=False)
    assert proc.returncode != 0
    assert "schema" in proc.stderr.lower() and message in proc.stderr
    # A declared key with a wrong value, not an unknown key (whose error names the key too).
    assert "additional properties" not in proc.stderr.lower()


@pytest.mark.parametrize(
    "values",
    [
        {"replicas": 3},  # an unknown top-level key (a typo of nodes, say)
        {"remote": {"url": "s3://b/p", "credentials": {"accessKey": "AKIA..."}}},  # no place for keys
        {"trainer": {"image": {"repository": "x"}, "gpus": 8}},
    ],
)
def test_helm_rejects_unknown_keys(helm_bin: Path, tmp_path: Path, values: dict[str, Any]) -> None:
    proc = helm(helm_bin, "template", RELEASE, str(CHART), values=with_remote(values), tmp=tmp_path,
                check=False)
    assert proc.returncode != 0
    assert "additional properties" in proc.stderr.lower() or "additionalproperties" in proc.stderr.lower()
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(with_remote(values), SCHEMA)


@pytest.mark.parametrize("url", ["gs://bucket/train", "gcs://bucket/train", "s3://b/p", "https://h/d",
                                 "file:///data/train", "s3://bucket", "s3://b/run#1", "http://10.0.0.5:8000/d",
                                 "file://localhost/data"])
def test_every_remote_scheme_of_the_image_is_accepted(helm_bin: Path, tmp_path: Path, url: str) -> None:
    """gs:// stays accepted: the image installs gcsfs for it (issue 9, D)."""
    # A file:// remote is a folder the sidecar mounts (the chart refuses one no mount holds).
    values: dict[str, Any] = {"remote": {"url": url}}
    if url.startswith("file:"):
        values["sidecar"] = {"extraVolumes": [{"name": "data", "emptyDir": {}}],
                             "extraVolumeMounts": [{"name": "data", "mountPath": "/data"}]}
    proc = helm(helm_bin, "template", RELEASE, str(CHART), "--show-only", "templates/job.yaml",
                values=values, tmp=tmp_path)
    job = yaml.safe_load(proc.stdout)
    side = job["spec"]["template"]["spec"]["initContainers"][0]
    assert {"name": "EPOCHFS_REMOTE", "value": url} in side["env"]


def test_a_valid_override_renders(helm_bin: Path, tmp_path: Path) -> None:
    """The schema is not so strict that ordinary settings fail."""
    values = with_remote({
        "nodes": 8, "trainer": {"image": {"repository": "ghcr.io/acme/train", "tag": "v3"},
                                "command": ["torchrun", "train.py"],
                                "resources": {"limits": {"nvidia.com/gpu": 8}},
                                "env": [{"name": "EPOCHS", "value": "90"}]},
        "cache": {"capacity": "1.5T", "volume": {"type": "ephemeral", "size": "2Ti"}},
        "job": {"activeDeadlineSeconds": 86400, "ttlSecondsAfterFinished": None,
                "labels": {"kueue.x-k8s.io/queue-name": "team-a"},
                "annotations": {"note": "any text, even spaces"}},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "commonLabels": {"team": "vision", "example.com/cost-center": "ML_42"},
        "schedulerName": "volcano",
    })
    helm(helm_bin, "template", RELEASE, str(CHART), values=values, tmp=tmp_path)
