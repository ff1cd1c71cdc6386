"""checkov over every rendered manifest of the matrix, against the reasoned skip list.

checkov runs without --skip-check: every finding must match an entry of tests/checkov-skips.yaml
by check id and resource kind, and every entry must still match a finding, so a new weakness
fails the test and a fixed one makes its skip go away.
"""

from __future__ import annotations

from pathlib import Path

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


def test_skip_list_is_short_and_reasoned() -> None:
    for section in ("kubernetes", "dockerfile"):
        for entry in SKIPS[section]:
            assert entry["id"].startswith("CKV") and len(entry["reason"]) > 40, entry
    assert len(SKIPS["kubernetes"]) <= 12


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
    failed = run_checkov(out, "kubernetes")
    missing, stale = unexplained(failed, SKIPS["kubernetes"])
    assert not missing, "checkov findings not in tests/checkov-skips.yaml:\n" + "\n".join(missing)
    assert not stale, f"skips no finding needs any more (remove them): {stale}"
