"""checkov over every rendered manifest of the matrix, against the reasoned skip list.

checkov runs without --skip-check: every finding must match an entry of tests/checkov-skips.yaml
by check id and resource kind, and every entry must still match a finding, so a new weakness
fails the test and a fixed one makes its skip go away.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from helm_helpers import (
    MATRIX,
    ROOT,
    helm_binary,
    render_example,
    render_text,
    run_checkov,
    unexplained,
    with_remote,
)

SKIPS = yaml.safe_load((ROOT / "tests" / "checkov-skips.yaml").read_text())

# The admission webhook's objects (webhook.enabled, off in every MATRIX case): its Deployment,
# Service, PodDisruptionBudget, NetworkPolicy, MutatingWebhookConfiguration and TLS (the chart's
# own CA in a Secret, or cert-manager's Issuer and Certificate), scanned like the Job; with digests
# too, so the Deployment's image is checked in the form CKV_K8S_43's skip points to. Installed as
# docs/kubernetes.md installs it (job.enabled=false), and scanned apart from the matrix: checkov's
# graph checks (CKV2_K8S_6, a pod without a NetworkPolicy) join objects across the files of one
# run, and the attach example's policy selects the release's pods by name and instance, which
# would hide a webhook pod without a policy of its own. The helm test pod is scanned in the matrix.
WEBHOOK = {"job": {"enabled": False}, "tests": {"enabled": False}}
WEBHOOK_CASES: dict[str, dict[str, Any]] = {
    "webhook": {**WEBHOOK, "webhook": {"enabled": True}},
    "webhook-cert-manager": {**WEBHOOK, "webhook": {"enabled": True, "certManager": {"enabled": True}}},
    "webhook-digests": {**WEBHOOK, "webhook": {"enabled": True},
                        "image": {"digest": "sha256:" + "a" * 64}},
}


def test_skip_list_is_short_and_reasoned() -> None:
    for section in ("kubernetes", "dockerfile"):
        for entry in SKIPS[section]:
            assert entry["id"].startswith("CKV") and len(entry["reason"]) > 40, entry
    assert len(SKIPS["kubernetes"]) <= 12


@pytest.mark.long
def test_checkov_passes_every_rendered_manifest(tmp_path: Path) -> None:
    helm_bin = helm_binary()
    out = tmp_path / "manifests"
    out.mkdir()
    for name, values in MATRIX.items():
        (out / f"{name}.yaml").write_text(render_text(helm_bin, with_remote(values), tmp_path))
    # The attach example's Pod (examples/kubernetes, with its NetworkPolicy and the chart's shared
    # objects) holds the same sidecar and trainer, and so the same findings, in both sidecar modes.
    for name, native in (("example-pod", True), ("example-pod-legacy", False)):
        objs = render_example(helm_bin, "pod", {"sidecar": {"native": native}}, tmp_path)
        (out / f"{name}.yaml").write_text(yaml.safe_dump_all(objs))
    webhook = tmp_path / "webhook"
    webhook.mkdir()
    for name, values in WEBHOOK_CASES.items():
        (webhook / f"{name}.yaml").write_text(render_text(helm_bin, with_remote(values), tmp_path))
    webhook_failed = run_checkov(webhook, "kubernetes")
    failed = run_checkov(out, "kubernetes") + webhook_failed
    missing, stale = unexplained(failed, SKIPS["kubernetes"])
    assert not missing, "checkov findings not in tests/checkov-skips.yaml:\n" + "\n".join(missing)
    assert not stale, f"skips no finding needs any more (remove them): {stale}"
    # The webhook's server was scanned (its findings are skipped ones, by kind Deployment).
    assert {f["resource"].split(".")[0] for f in webhook_failed} == {"Deployment"}, webhook_failed
