"""A relist's end counts the rows it drops for narrower ``--include``/``--exclude`` apart from the
keys gone from the remote (r54).

A sampler started again with ``--include 'a*'`` logged ``10 gone from the remote dropped`` while
the bucket held all 20 objects: every row the end of a listing drops was called gone, those the
new globs leave out too. Now they read "N dropped: left out by --include/--exclude now", and
only keys deleted from the bucket are "gone from the remote". Real ``epochfs sample`` processes
against a moto S3 server, each stopped once its listing's catalog line is logged.
"""

from __future__ import annotations

from pathlib import Path

from common import S3Server, put_objects, wait_until
from sampler_helpers import running_sampler

OBJECTS = {f"data/{c}{i:02d}.bin": bytes([i]) * 64 for c in "ab" for i in range(10)}


def _catalog_line(cache: Path, remote: str, endpoint: str, *globs: str) -> str:
    """The catalog line of one sampler run's listing (the run stopped after it). The runs append
    to one log: the lines of earlier runs, counted before this one starts, are passed over."""
    log = cache.parent / f"{cache.name}-sampler.log"

    def lines() -> list[str]:
        text = log.read_text(errors="replace") if log.exists() else ""
        return [ln for ln in text.splitlines() if "epochfs.catalog INFO catalog: " in ln]

    before = len(lines())
    with running_sampler(cache, remote, "--endpoint-url", endpoint, "--capacity", "10Mi", *globs):
        new = wait_until(lambda: lines()[before:], timeout=120, what="the listing's catalog line")
    return new[0]


def test_rows_left_out_by_narrower_globs_are_not_called_gone(s3: S3Server, tmp_path: Path) -> None:
    put_objects(s3, "bkt", OBJECTS)
    cache = tmp_path / "cache"
    first = _catalog_line(cache, "s3://bkt/data", s3.endpoint)
    assert "20 cataloged" in first and "dropped" not in first, first

    narrower = _catalog_line(cache, "s3://bkt/data", s3.endpoint, "--include", "a*")
    assert "10 cataloged" in narrower, narrower
    assert "10 dropped: left out by --include/--exclude now" in narrower, narrower
    assert "gone from the remote" not in narrower, f"the bucket still holds all 20: {narrower}"

    s3.client().delete_object(Bucket="bkt", Key="data/a00.bin")  # one key gone, one more left out
    both = _catalog_line(cache, "s3://bkt/data", s3.endpoint, "--include", "a*", "--exclude", "a09*")
    assert "8 cataloged" in both, both
    assert "1 gone from the remote dropped, 1 dropped: left out by --include/--exclude now" in both, both
