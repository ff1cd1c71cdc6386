"""What the docs say about /metrics and the PublishPaused runbook matches what the sidecar does.

* With ``--metrics-port``, ``/metrics`` is served only there; the health port answers it 404
  (``tests/sidecar/test_supervisor.py::test_second_signal_exits_at_once`` checks the behaviour).
  docs/metrics.md, docs/sidecar.md and docs/reliability.md said it was "also" on that port, which
  sends an operator scraping the health port to a 404.
* A folder view whose volume is full cannot rewrite its ``status.json`` (docs/folderview.md), so
  the EpochfsPublishPaused runbook must not send the operator there for ``publish_paused`` (a
  reviewer found it unset, 38 s old, while the metric said paused); ``epochfs status --cache``
  reads the reason from the index.
"""

from __future__ import annotations

import re

from common import ROOT

DOCS = sorted((ROOT / "docs").glob("*.md"))


def _paragraphs(text: str) -> list[str]:
    """Paragraphs and list items, each joined onto one line."""
    parts = re.split(r"\n\s*\n|\n(?=\s*(?:\*|\d+\.) )", text)
    return [" ".join(p.split()) for p in parts]


def test_no_page_says_metrics_are_also_on_the_metrics_port() -> None:
    said = [(page.name, p) for page in DOCS for p in _paragraphs(page.read_text())
            if "--metrics-port" in p and "/metrics" in p]
    assert len(said) >= 3, said  # metrics.md, sidecar.md (start, own section), reliability.md
    wrong = [(name, p) for name, p in said if re.search(r"\balso on\b", p)]
    assert not wrong, wrong


def test_the_sidecar_docs_say_the_health_port_answers_metrics_404_with_a_metrics_port() -> None:
    for page in ("metrics.md", "sidecar.md"):
        [first] = [p for p in _paragraphs((ROOT / "docs" / page).read_text())
                   if "--metrics-port" in p and "/metrics" in p][:1]
        assert "only" in first and "404" in first, (page, first)


def test_the_publish_paused_runbook_reads_the_index_not_the_folders_status_json() -> None:
    text = (ROOT / "docs" / "metrics.md").read_text()
    runbook = text.split("### EpochfsPublishPaused", 1)[1].split("\n### ", 1)[0]
    check = runbook.split("**What to check.**", 1)[1].split("**What to do.**", 1)[0]
    assert "epochfs status --cache" in " ".join(check.split()), check
    assert "epochfs_publish_paused" in check, check
    assert "`status.json`'s `publish_paused`" not in check, check
    assert "STALE" in check, check  # what `epochfs status --mount` shows of a file it cannot rewrite
