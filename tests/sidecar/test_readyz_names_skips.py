"""``/readyz`` names the keys given up while the cache is empty.

Why: a store whose listing is allowed and whose every object read is refused (an IAM policy with
``s3:ListBucket`` and no ``s3:GetObject``) leaves nothing to fetch: the sampler gives every key up
at once, the pod never becomes ready, and its reason said only ``epoch 0: 0/1 samples cached``,
as for a sidecar still fetching its first sample. It now counts the skips and says what to do.
A real sidecar on moto behind a front that answers each object GET with S3's AccessDenied.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from common import S3Server, put_objects, random_objects, wait_until
from remote.answering_front import AnsweringFront
from sidecar_helpers import running_sidecar

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not Path("/dev/fuse").exists(),
                                reason="needs root and /dev/fuse")


def _object_get(method: str, path: str) -> bool:
    return method == "GET" and "list-type=" not in path and path.split("?")[0].count("/") >= 2


def test_readyz_counts_the_skips_of_a_catalog_whose_reads_are_refused(s3: S3Server,
                                                                     tmp_path: Path) -> None:
    put_objects(s3, "denied", random_objects(6, 1000))
    with AnsweringFront(upstream=s3.endpoint) as front:
        front.answer("s3-access-denied", only=_object_get)
        with running_sidecar(tmp_path, remote="s3://denied/train", endpoint=front.url,
                             expect_ready=False) as car:
            def reason() -> str:
                code, body = car.get("/readyz")
                return "" if code == 0 else str(json.loads(body).get("reason", ""))

            wait_until(lambda: "6 key(s) given up" in reason(), timeout=60, what="the skips in /readyz")
            code, body = car.get("/readyz")
            doc = json.loads(body)
            assert code == 503 and doc["samples"] == 0, doc
            assert doc["reason"].startswith("epoch 0: 0/1 samples cached"), doc
            assert "after their downloads failed" in doc["reason"] and "epochfs relist" in doc["reason"], doc
        assert front.answered >= 6 and front.passed >= 1  # every object refused, the listing passed
