"""End to end: ``epochfs sample`` from moto's S3 server into a cache, ``epochfs mount`` over it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from common import S3Server, put_objects, random_objects, wait_until
from digest_helpers import digest_of
from fuse_helpers import files_under, mounted
from sampler_helpers import running_sampler, s3_env

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                       reason="needs root and /dev/fuse"),
]


def test_sampled_epoch_matches_the_remote_byte_for_byte(s3: S3Server, tmp_path: Path) -> None:
    objects = random_objects(40, 20_000, prefix="train/") | random_objects(3, 70_000, prefix="val/")
    put_objects(s3, "bkt", {f"ds/{k}": v for k, v in objects.items()})
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    with running_sampler(cache, "s3://bkt/ds", "--endpoint-url", s3.endpoint, "--capacity", "1Gi",
                         "--min-samples", str(len(objects)), env=s3_env(s3.endpoint)), \
            mounted(cache, mnt) as m:
        # Each poll is a lookup that asks for a cut; it succeeds once every object is in.
        wait_until(lambda: os.path.isdir(m.path / "epoch-0"), timeout=60, what="epoch-0 cut")
        assert files_under(m.path / "epoch-0") == objects
        rows = [line.split("\t") for line in
                (m.path / ".epochfs" / "epoch-0.manifest").read_text().splitlines()[1:]]
        # Each vouched for by the CRC32 S3 stored at the upload (and computed while streaming).
        assert {r[0]: r[2] for r in rows} == {k: digest_of("crc32", v) for k, v in objects.items()}
        status = json.loads((m.path / ".epochfs" / "status.json").read_text())
        assert status["samples"] == len(objects) and status["latest_epoch"] == 0
