"""Statements of docs/ that contradicted the implementation, read from the pages and checked
against the code that decides them, so they cannot drift again:

* docs/design.md said a lookup of ``epoch-7`` when the newest is ``epoch-3`` cuts epoch 7; only
  the next epoch is cut by a lookup (``next_epoch``), a jump is explicit (``MAX_JUMP``).
* docs/design.md said schedule mode lists the catalog once; relists run in it too.
* docs/mount.md said ``status.json`` is the same document as ``epochfs status --json``; the CLI
  adds the supervisor's totals, which the mount's file lacks.
* docs/sampler.md said the object limit is --max-object-size "and never more than one epoch may
  hold"; one above --capacity is refused, not lowered.
* DESIGN.md's growth-threshold cut is not built, and docs/ did not say so.
* --capacity counts apparent sizes; docs/sampler.md and docs/kubernetes.md did not say that the
  blocks on disk and the index come on top, which an emptyDir ``sizeLimit`` counts.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from epochfs.sidecar.config import ConfigError, SamplerSettings, format_size, parse
from epochfs.sidecar.metrics import SidecarMetrics
from epochfs.sidecar.status import read_stats
from epochfs.sidecar.store import MAX_JUMP, Meta, Store
from epochfs.sidecar.store.epochnumbers import next_epoch

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _text(page: str) -> str:
    """The page with its line breaks and indents folded into single spaces."""
    return " ".join((DOCS / page).read_text(encoding="utf-8").split())


def _section(text: str, start: str, end: str) -> str:
    i = text.index(start)
    return text[i:text.index(end, i + len(start))]


def test_design_md_states_the_lookup_rule_that_the_store_applies() -> None:
    epochs = _section(_text("design.md"), "## Epochs", "## Remotes")
    assert "cuts epoch 7 (numbers 4-6 never exist)" not in epochs
    rule = "asks for a cut only when N is the next epoch (the newest plus one, or 0 before the first)"
    assert rule in epochs
    assert "A lookup of `epoch-N` in the mount asks for a cut only when N is the next epoch (the newest " \
           "plus one, or 0 before the first)" in _text("sampler.md"), "the rule design.md repeats"
    assert next_epoch(None) == 0 and next_epoch(1) == 2, "the one number a lookup may cut"
    assert "`stat epoch-7` when the newest is `epoch-1`" in epochs and "cuts nothing" in epochs
    assert f"a jump of more than {MAX_JUMP:,} epochs needs `--far`" in epochs


def test_design_md_says_schedule_mode_relists() -> None:
    schedule = _section(_text("design.md"), "* **Schedule mode**", "* **Pins and retirement**")
    assert "listed once" not in schedule
    assert "relists (`--relist-interval`, `epochfs relist`) run as in snapshot mode" in schedule
    assert "new keys join the sampling order where their rank puts them" in schedule
    assert "new keys join the sampling order where their rank puts them" in _text("listing.md")


def test_mount_md_names_what_status_json_lacks_beside_the_clis_document(tmp_path: Path) -> None:
    """The CLI's ``--cache`` document is the store's stats plus the supervisor's saved totals
    (the keys ``SidecarMetrics.totals`` saves); the page names each of them."""
    totals = SidecarMetrics(registry=CollectorRegistry()).totals()
    with Store(tmp_path / "cache", create=True) as store:
        own = set(store.stats().to_json())
        store.set_meta(Meta.SIDECAR_TOTALS, json.dumps(totals))
    cli = set(read_stats(cache=tmp_path / "cache", mount=None))
    # Beside the totals, --cache adds what it reads beside the index (docs/metrics.md, `epochfs
    # status`): whether a sampler runs, and which epochs readers pin.
    assert cli - own == set(totals) | {"sampler_running", "pinned_epochs"} and totals
    text = _text("mount.md")
    assert "the same document as `epochfs status --json`" not in text
    bullet = _section(text, "* `status.json` is `Store.stats()`", "## Epochs")
    for key in totals:
        assert f"`{key}`" in bullet, key
    assert "`epochfs status --json --mount DIR` reads this file, so it has no totals" in bullet


def _settings(tmp_path: Path, *flags: str) -> SamplerSettings:
    return parse(SamplerSettings, ["--cache", str(tmp_path / "c"), "--remote", "file:///unused",
                                   *flags], environ={})


def test_sampler_md_states_the_object_limit_as_the_settings_apply_it(tmp_path: Path) -> None:
    text = _text("sampler.md")
    assert "and never more than one epoch may hold" not in text
    assert ("the limit is what one epoch may hold (`capacity × (1 − headroom)`), or "
            "`--max-object-size` when that is smaller") in text
    assert "A `--max-object-size` between the epoch budget and `--capacity` is lowered to the epoch " \
           "budget" in text
    # Between the epoch budget (48 KiB of 64 KiB, headroom 0.25) and the capacity: lowered.
    between = _settings(tmp_path, "--capacity", "64Ki", "--max-object-size", "56Ki")
    assert between.object_limit == between.policy().epoch_budget == 48 * 1024
    # Above the capacity: refused, in the words the page quotes.
    with pytest.raises(ConfigError) as refused:
        _settings(tmp_path, "--capacity", "64Ki", "--max-object-size", "1Mi").validate()
    quoted = re.search(r"refused at the start with exit 2 \(`([^`]*)`\)", text)
    assert quoted is not None and quoted.group(1) == str(refused.value)
    assert str(refused.value).startswith(f"--capacity: {format_size(64 * 1024)} is smaller")


def test_design_md_records_that_there_is_no_growth_threshold_cut() -> None:
    bullet = _section(_text("design.md"), "* **What cuts an epoch; no growth threshold.**",
                      "* **Pins and retirement**")
    assert "There is no growth-threshold cut" in bullet
    for way in ("`--cut-interval SECONDS`", "`epochfs cut`", "`POST /v1/cut`", "lookup"):
        assert way in bullet, way
    parsed = _settings(Path("/nonexistent"), "--cut-interval", "30")
    assert parsed.cut_interval == 30.0 and "(default 0: off" in bullet
    assert _settings(Path("/nonexistent")).cut_interval == 0.0


def test_the_capacity_docs_say_it_counts_sizes_not_blocks() -> None:
    disk = _section(_text("sampler.md"), "## Disk space", "`--capacity` is a budget, not a promise")
    assert "counts each sample's size in bytes, its apparent size" in disk
    assert "1,000,000 B by the budget, 1,638,400 B of blocks" in disk
    assert 200 * -(-5000 // 4096) * 4096 == 1_638_400, "the figure the page gives"
    assert "volume ≥ --capacity × ceil(s / 4096) × 4096 / s + K × 240 B + 16 MiB" in disk
    k8s = _text("kubernetes.md")
    assert "so the kubelet never evicts the pod" not in k8s
    row = _section(k8s, "| `cache.capacity` |", "| `cache.")
    assert "not the 4 KiB blocks their files take" in row
    assert "[sampler.md](sampler.md#disk-space)" in row
