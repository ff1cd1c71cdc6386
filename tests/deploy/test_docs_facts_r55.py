"""What the operator docs of review 55 say matches what the sidecar and the chart do.

* EpochfsChecksumFailures: the sampler's scrub fetches a damaged object again at once, so
  ``epochfs verify --report-only`` run afterwards shows ``"damaged": []``; the scrub's record is
  its log line, which the runbook must send the on-call to first.
* ``epochfs status --mount /mnt/epochfs`` is the volume, not the view (``/mnt/epochfs/view`` in
  the chart's pods, ``$EPOCHFS_MOUNT`` in the sidecar's container).
* EpochfsChildRestarting also fires for a remote unreachable at the sampler's start (exit 75, a
  transient failure, not a crash), whose checks are the remote's, not memory.
* docs/kubernetes.md calls backpressure alone normal, as docs/metrics.md does.
"""

from __future__ import annotations

import re
from pathlib import Path

from common import ROOT
from helm_helpers import container, env_of, pod_spec, render, with_remote

from epochfs.sidecar import config
from epochfs.sidecar.store import integrity

METRICS = ROOT / "docs" / "metrics.md"
KUBERNETES = ROOT / "docs" / "kubernetes.md"


def _section(text: str, title: str) -> str:
    return text.split(f"### {title}\n", 1)[1].split("\n### ", 1)[0]


def _part(section: str, start: str, end: str) -> str:
    return " ".join(section.split(start, 1)[1].split(end, 1)[0].split())


def test_the_checksum_runbook_reads_the_scrubs_log_first() -> None:
    runbook = _section(METRICS.read_text(), "EpochfsChecksumFailures")
    check = runbook.split("**What to check.**", 1)[1].split("**What to do.**", 1)[0]
    first = " ".join(check.strip().split("\n* ")[0].split())
    assert first.startswith("* `kubectl logs POD -c epochfs | grep 'scrub:'`"), first
    # The pattern finds the line the scrub writes for each damaged object.
    scrub = (ROOT / "sidecar" / "scrub.py").read_text()
    assert re.search(r"log\.warning\(\"scrub: cached object of %r is damaged \(%s\): %s\"", scrub)
    assert "fetched again into its place" in scrub and "fetched again into its place" in first
    # verify comes after, for its own runs, with the file it writes.
    flat = " ".join(check.split())
    assert flat.index("scrub:") < flat.index("epochfs verify")
    assert integrity.QUARANTINE_LOG in flat and '"damaged": []' in flat


def test_status_is_shown_on_the_view_not_the_volume(helm_bin: Path, tmp_path: Path) -> None:
    text = METRICS.read_text()
    shown = re.findall(r"epochfs status --mount (\"[^\"]*\"|[^\s'`]+)", text)
    assert len(shown) >= 3, shown
    assert set(shown) == {'"$EPOCHFS_MOUNT"'}, shown
    sidecar = container(pod_spec(render(helm_bin, with_remote({}), tmp_path)), "epochfs")
    assert env_of(sidecar)["EPOCHFS_MOUNT"] == "/mnt/epochfs/view"


def test_the_child_restarting_runbook_tells_a_remote_unreachable_from_a_crash() -> None:
    runbook = " ".join(_section(METRICS.read_text(), "EpochfsChildRestarting").split())
    assert f"exit {config.EXIT_RETRY}" in runbook or f"status {config.EXIT_RETRY}" in runbook, runbook
    assert "a transient failure, not a crash" in runbook and "retrying" in runbook
    children = " ".join((ROOT / "sidecar" / "supervisor" / "children.py").read_text().split())
    assert 'could not reach the remote (exit 75 after %.1fs): a transient failure, " "not a crash' in children
    assert config.EXIT_RETRY == 75
    check = _part(runbook, "**What to check.**", "**What to do.**")
    assert "(#epochfssamplerstalled)" in check
    for word in ("credentials", "DNS", "--endpoint-url", "OOM"):
        assert word in check, word


def test_kubernetes_md_calls_backpressure_alone_normal() -> None:
    text = KUBERNETES.read_text()
    assert "the cache is full of pinned epochs" not in text
    [row] = [line for line in text.splitlines()
             if line.startswith("| `BackpressureStarted` / `BackpressureEnded`")]
    assert "| Normal / Normal |" in row and "normal" in row.split("|")[3], row
    bullet = " ".join(text.split("* **Backpressure**:", 1)[1].split("\n* ", 1)[0].split())
    assert "normal" in bullet and "EpochfsBackpressure" in bullet, bullet
    assert "Backpressure alone is normal" in METRICS.read_text()
