"""The log's warning for a complete listing that cataloged nothing names the cause the report shows:
keys left out by ``--include``/``--exclude`` are not a mistyped prefix (status and ``/readyz`` already
said so; the log told the user to check ``--remote``'s prefix)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from epochfs.sidecar.config import SamplerSettings
from epochfs.sidecar.listing.capacity import check_capacity
from epochfs.sidecar.listing.filter import CatalogReport


@pytest.mark.parametrize(("excluded", "said"), [(0, "check --remote's prefix"),
                                                  (7, "--include/--exclude left out every key")])
def test_the_empty_catalog_warning_names_its_cause(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                   excluded: int, said: str) -> None:
    settings = SamplerSettings(remote="s3://bkt/train", cache=tmp_path)
    with caplog.at_level(logging.WARNING, logger="epochfs.sampler"):
        check_capacity(settings, CatalogReport(listed=7, in_shard=7, excluded=excluded, complete=True))
    [line] = [r.getMessage() for r in caplog.records if "0 objects under" in r.getMessage()]
    assert said in line and ("check --remote" in line) is (not excluded), line
