"""The example of docs/kubernetes.md, "Attach with one annotation", works as printed: its pod
template's annotations, sent to the webhook that its own ``helm install`` line makes, are admitted,
and the sidecar gets the remote and the capacity they name.

Both blocks are read out of the page (the first ``yaml`` block and the first ``sh`` block of the
section), the install line rendered with the real helm (``helm template`` with the same values),
and the pod reviewed over HTTPS by the served webhook.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import jsonpatch
import yaml
from test_webhook_server import serve
from webhook_helpers import job, job_pod, profile_documents, write_profiles

from epochfs.sidecar.confparse import parse_size

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "kubernetes.md"
SECTION = "## Attach with one annotation"


def _blocks(tag: str) -> list[str]:
    text = PAGE.read_text()
    start = text.index(SECTION)
    section = text[start:text.index("\n## ", start + len(SECTION))]
    return re.findall(rf"^```{tag}\n(.*?)^```", section, re.S | re.M)


def _install_args() -> list[str]:
    """The section's ``helm install`` line as ``helm template`` arguments (release, chart, values)."""
    [line] = [b for b in _blocks("sh") if "helm install" in b][:1]
    words = shlex.split(line.replace("\\\n", " "))
    assert words[:2] == ["helm", "install"], words
    args = [w for w in words[2:] if w != "--create-namespace"]
    return ["template", *args]


def _annotations() -> dict[str, str]:
    [block] = _blocks("yaml")[:1]
    annotations: dict[str, str] = yaml.safe_load(block)["metadata"]["annotations"]
    return annotations


def test_the_documented_annotations_are_admitted_by_the_documented_install(
    helm_bin: Path, tmp_path: Path
) -> None:
    out = subprocess.run([str(helm_bin), *_install_args()], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    docs = profile_documents([o for o in yaml.safe_load_all(out) if o])
    annotations = _annotations()
    assert annotations["epochfs.io/profile"] in docs, sorted(docs)
    pod = job_pod(job(annotations=annotations))
    (tmp_path / "tls").mkdir()
    for served in serve(write_profiles(docs, tmp_path / "profiles"), tmp_path / "tls"):
        response = served.client.review(pod)["response"]
    assert response["allowed"] is True, response
    patched: dict[str, Any] = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    [sidecar] = patched["spec"]["initContainers"]
    env = {e["name"]: e.get("value") for e in sidecar["env"]}
    assert env["EPOCHFS_REMOTE"] == annotations["epochfs.io/remote"]
    assert env["EPOCHFS_CAPACITY"] == str(parse_size(annotations["epochfs.io/capacity"]))
