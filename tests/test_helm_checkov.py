"""checkov over every rendered manifest of the matrix, against the reasoned skip list.

checkov runs without --skip-check: every finding must match an entry of tests/checkov-skips.yaml
by check id and resource kind, and every entry must still match a finding, so a new weakness
fails the test and a fixed one makes its skip go away.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml
from helm_helpers import MATRIX, ROOT, checkov_binary, helm_binary, render_text, with_remote

SKIPS = yaml.safe_load((ROOT / "tests" / "checkov-skips.yaml").read_text())


def run_checkov(target: Path, framework: str) -> list[dict[str, Any]]:
    """Failed checks of one checkov run (offline: no download of guidelines)."""
    flag = "-d" if target.is_dir() else "-f"
    proc = subprocess.run(
        [str(checkov_binary()), flag, str(target), "--framework", framework, "-o", "json",
         "--skip-download", "--compact"],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    reports = report if isinstance(report, list) else [report]
    passed = sum(len(r["results"]["passed_checks"]) for r in reports)
    assert passed > 0, "checkov checked nothing"
    return [f for r in reports for f in r["results"]["failed_checks"]]


def unexplained(failed: list[dict[str, Any]], skips: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(findings no skip explains, skips no finding needs)."""
    used: set[str] = set()
    missing = []
    for f in failed:
        kind = f["resource"].split(".")[0]
        entry = next((s for s in skips if s["id"] == f["check_id"] and kind in s.get("kinds", [kind])), None)
        if entry is None:
            missing.append(f"{f['check_id']} {f['check_name']} on {f['resource']} ({f['file_path']})")
        else:
            used.add(entry["id"])
    stale = [s["id"] for s in skips if s["id"] not in used]
    return missing, stale


def test_skip_list_is_short_and_reasoned() -> None:
    for section in ("kubernetes", "dockerfile"):
        for entry in SKIPS[section]:
            assert entry["id"].startswith("CKV") and len(entry["reason"]) > 40, entry
    assert len(SKIPS["kubernetes"]) <= 12


def test_checkov_passes_every_rendered_manifest(tmp_path: Path) -> None:
    helm_bin = helm_binary()
    for name, values in MATRIX.items():
        (tmp_path / f"{name}.yaml").write_text(render_text(helm_bin, with_remote(values), tmp_path))
    failed = run_checkov(tmp_path, "kubernetes")
    missing, stale = unexplained(failed, SKIPS["kubernetes"])
    assert not missing, "checkov findings not in tests/checkov-skips.yaml:\n" + "\n".join(missing)
    assert not stale, f"skips no finding needs any more (remove them): {stale}"
