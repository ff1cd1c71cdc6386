"""docs/sampler.md gives a throttled key's delay bound from the constants the code uses: it said
``min(20 s, ...)`` while :data:`~epochfs.sidecar.sampler.throttle.DEFER_CAP` was 10 s."""

from __future__ import annotations

from common import ROOT

from epochfs.sidecar.sampler.throttle import DEFER_BASE, DEFER_CAP


def _seconds(value: float) -> str:
    return f"{value:g} s"


def test_the_throttle_delay_in_the_docs_is_the_codes() -> None:
    text = " ".join((ROOT / "docs" / "sampler.md").read_text().split())
    said = f"`uniform(0, min({_seconds(DEFER_CAP)}, {_seconds(DEFER_BASE)} × 2^n))`"
    assert said in text, f"docs/sampler.md should give the throttle delay as {said}"
