"""``/readyz`` tells a large object's download while no sample has landed: the rate and the time
left of the bytes the downloads in flight have received, as ``epochfs status`` does.

Why: a probe (or an operator's ``curl``) of a sidecar whose first sample is a 1 GiB shard read
``epoch 0: 0/1 samples cached`` and nothing more for the whole download, its estimate made from
the admitted counters alone, so a sidecar at work looked stuck. A real sidecar over a ``file://``
remote of one 48 MiB object, its download held to 8 MiB/s by ``--max-rate``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from common import wait_until
from sidecar_helpers import running_sidecar

SIZE = 48 << 20


def test_readyz_reports_the_download_of_a_large_first_object(tmp_path: Path) -> None:
    data = tmp_path / "data" / "train"
    data.mkdir(parents=True)
    with open(data / "shard-000.tar", "wb") as f:
        f.write(os.urandom(SIZE))
    reasons: list[str] = []

    def downloading() -> bool:
        code, body = car.get("/readyz")
        reason = str(json.loads(body).get("reason", "")) if code == 503 else ""
        reasons.append(reason)
        return "downloading at" in reason

    with running_sidecar(tmp_path, remote=(tmp_path / "data").as_uri(), endpoint="",
                         extra=("--max-rate", "8Mi", "--capacity", "256Mi", "--min-samples", "1"),
                         expect_ready=False) as car:
        wait_until(downloading, timeout=60, what="/readyz to tell the download")
    reason = reasons[-1]
    assert reason.startswith("epoch 0: 0/1 samples cached, downloading at "), reason
    assert "of 48.0 MiB in flight received, ~" in reason and reason.endswith(" s left for those"), reason
