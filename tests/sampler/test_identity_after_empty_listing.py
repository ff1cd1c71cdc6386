"""A mistyped prefix lists to the end and finds nothing: the corrected ``--remote`` takes the cache.

Before: the first run on an empty prefix warned "0 objects under …: check --remote's prefix" (status,
``/readyz``, the log), and the corrected command was refused for good, "the cache … was filled with
'<the empty prefix>'", exit 2, though the cache held no catalog row, no sample and no epoch: with a
persistent cache the fixed pod exited 2 for ever. Real ``epochfs sample`` processes over a
``file://`` folder and a moto S3 server.
"""

from __future__ import annotations

import os
from pathlib import Path

from common import S3Server, put_objects, wait_until
from sampler_helpers import index_rows, s3_env, start_sampler

from epochfs.sidecar.store import Meta

COUNT = 6


def _listed_to_the_end(cache: Path) -> bool:
    return bool(index_rows(cache, "SELECT 1 FROM meta WHERE name=?", (Meta.LISTING_COMPLETE.value,)))


def _samples(cache: Path) -> int:
    rows = index_rows(cache, "SELECT value FROM counters WHERE name='cache_samples'")
    return int(str(rows[0][0])) if rows else 0


def _meta(cache: Path, key: Meta) -> str | None:
    rows = index_rows(cache, "SELECT value FROM meta WHERE name=?", (key.value,))
    return str(rows[0][0]) if rows else None


def _typo_then_fixed(cache: Path, typo: str, fixed: str, *flags: str,
                     env: dict[str, str] | None = None) -> None:
    first = start_sampler(cache, typo, *flags, env=env)
    try:
        wait_until(lambda: _listed_to_the_end(cache) or not first.alive(), timeout=60,
                   what="the empty prefix listed to its end")
        assert first.alive(), first.log_text()[-3000:]
    finally:
        assert first.stop() == 0, first.log_text()[-3000:]
    assert "check --remote's prefix" in first.log_text(), first.log_text()[-3000:]
    second = start_sampler(cache, fixed, *flags, env=env, log=cache.parent / "fixed.log")
    try:
        wait_until(lambda: _samples(cache) == COUNT or not second.alive(), timeout=60,
                   what="the corrected remote's samples")
        assert second.alive(), second.log_text()[-3000:]
    finally:
        assert second.stop() == 0, second.log_text()[-3000:]
    assert _meta(cache, Meta.SAMPLER_REMOTE) == fixed
    assert _meta(cache, Meta.CATALOG_OBJECTS) == str(COUNT)


def test_a_file_remote_listed_empty_leaves_the_cache_to_the_corrected_one(tmp_path: Path) -> None:
    data, empty = tmp_path / "data", tmp_path / "emptyds"
    data.mkdir()
    empty.mkdir()
    for i in range(COUNT):
        (data / f"{i}.bin").write_bytes(os.urandom(64))
    _typo_then_fixed(tmp_path / "cache", empty.as_uri(), data.as_uri(), "--capacity", "1Mi")


def test_an_s3_prefix_listed_empty_leaves_the_cache_to_the_corrected_one(tmp_path: Path,
                                                                         s3: S3Server) -> None:
    put_objects(s3, "bkt", {f"train/{i}.bin": os.urandom(64) for i in range(COUNT)})
    _typo_then_fixed(tmp_path / "cache", "s3://bkt/trian", "s3://bkt/train", "--capacity", "1Mi",
                     "--endpoint-url", s3.endpoint, env=s3_env(s3.endpoint))

