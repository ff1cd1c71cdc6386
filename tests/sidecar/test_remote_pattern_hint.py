"""A ``--remote`` written as a pattern is told it is a prefix, and what to write instead.

Why: writing a pattern into the dataset's URL (``s3://imgs/train/*.jpg``: gsutil's and fsspec's
globs, webdataset's braces) is a first-hour habit; the listing of that prefix finds nothing, and
the warning said only "check --remote's prefix", which looks right to the user. The warning, in the
log, ``status.json``'s listing and ``/readyz``, now names the prefix and ``--include``. A real
``epochfs sample`` on moto, and the listing's own log line.
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest
from common import S3Server, put_objects, wait_until
from sidecar_helpers import EPOCHFS

from epochfs.sidecar.config import SamplerSettings
from epochfs.sidecar.listing.capacity import check_capacity
from epochfs.sidecar.listing.filter import CatalogReport
from epochfs.sidecar.store import Store
from epochfs.sidecar.store.prefixfix import prefix_fix


@pytest.mark.parametrize(("remote", "fix"), [
    ("s3://imgs/train/*.jpg",
     "--remote is a prefix, not a pattern: --remote s3://imgs/train --include '*.jpg'"),
    ("gs://b/shards/shard-{000..099}.tar", "--remote is a prefix, not a pattern: --remote gs://b/shards "
     "--include 'shard-*.tar' (--include takes globs; braces are not expanded)"),
    ("s3://b/imgs/x[0-9]/",
     "--remote is a prefix, not a pattern: --remote s3://b/imgs --include 'x[0-9]/**'"),
    ("http://host/data?token=***", "check --remote's prefix"),
    ("s3://imgs/train", "check --remote's prefix"),
    ("s3://*", "check --remote's prefix"),
])
def test_the_fix_named_for_an_empty_listing(remote: str, fix: str) -> None:
    assert prefix_fix(remote) == fix


def test_the_listing_log_names_include(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings = SamplerSettings(remote="s3://bkt/train/*.npy", cache=tmp_path)
    with caplog.at_level(logging.WARNING, logger="epochfs.sampler"):
        check_capacity(settings, CatalogReport(listed=0, in_shard=0, excluded=0, complete=True))
    [line] = [r.getMessage() for r in caplog.records if "0 objects under" in r.getMessage()]
    assert "--remote s3://bkt/train --include '*.npy'" in line, line


def test_a_sampler_given_a_pattern_says_so_in_its_status(s3: S3Server, tmp_path: Path) -> None:
    put_objects(s3, "pat", {"train/x.npy": b"\x93NUMPY"})
    cache = tmp_path / "cache"
    proc = subprocess.Popen([*EPOCHFS, "sample", "--remote", "s3://pat/train/*.npy", "--endpoint-url",
                             s3.endpoint, "--cache", str(cache), "--capacity", "1Mi"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def warning() -> str:
            if not (cache / "index.sqlite").exists():
                return ""
            with Store(cache) as store:
                return str(store.listing_known().get("warning") or "")

        wait_until(lambda: "0 objects under" in warning() or proc.poll() is not None, timeout=60,
                   what="the empty listing's warning")
        assert "--remote s3://pat/train --include '*.npy'" in warning(), (warning(), proc.poll())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
