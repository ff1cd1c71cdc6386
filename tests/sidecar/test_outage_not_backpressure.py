"""A remote that goes down while the cache turns over at its budget is an outage, never
backpressure: ``epochfs_backpressure`` stays 0 and no "cache full" pause is recorded.

Why it matters: EpochfsSamplerStalled, the one alert for a remote that stops answering while the
sampler runs, holds only while ``epochfs_backpressure == 0``. After a cut, a snapshot-mode cache
at its budget evicts for the turn's share of the headroom; if the downloads that evicted then
fail (the remote is down) and their share is not given back, the next try finds the share spent
and the sampler reports "cache full ... and nothing evictable" with room free, which silences the
alert for the whole outage.

Real parts: moto's S3 server in a process of its own, stopped mid-run; the real ``epochfs
sidecar`` (supervisor, sampler, FUSE view) scraped on ``/metrics``; the index read for the
recorded backpressure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from common import moto_server, put_objects, random_objects, stop_process, wait_until
from sidecar_helpers import running_sidecar

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]

SIZE = 64 * 1024
OUTAGE = "remote unavailable"
"""The breaker's line: the outage recognised (once per pause, the pauses doubling from 2 s)."""
LINES = 4
"""Lines of the outage looked through: its recognition and three tries after a pause (~15 s)."""


def _backpressure_lines(log: str) -> list[str]:
    """The sampler's lines that say it waits for room: the pause's own line (said at most once a
    minute) and the state of the progress line (once a second, never held back)."""
    said = ("INFO backpressure: ", "backpressure: cache full")
    return [line for line in log.splitlines() if "epochfs.sampler" in line and any(s in line for s in said)]


@pytest.mark.long
def test_a_remote_outage_on_a_full_cache_is_not_reported_as_backpressure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 4 MiB budget of 64 KiB samples (a turn's share: 512 KiB, 8 samples) under a 32-download
    window, a cut every 2 s: the remote is stopped once the cache has evicted, and the sidecar is
    scraped from the moment the outage is recognised (no download can be admitted after that, so
    no room can be spent) through three of the breaker's tries."""
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    with moto_server(tmp_path / "moto.log") as server:
        put_objects(server, "data", random_objects(160, SIZE))
        with running_sidecar(tmp_path, remote="s3://data", endpoint=server.endpoint,
                             extra=("--capacity", "4Mi", "--cut-interval", "2", "--concurrency", "32",
                                    "--retries", "2", "--retire-grace", "1")) as car:
            wait_until(lambda: (car.metric("epochfs_evicted_samples_total") or 0) > 0, timeout=60,
                       what="the cache at its budget, turning over")
            stop_process(server.process)
            seen: list[float] = []
            """epochfs_backpressure of each scrape taken after the outage was recognised."""

            def outage_looked_through() -> bool:
                lines = car.log_text().count(OUTAGE)  # read before the scrape: it comes after
                if lines:
                    seen.append(car.metric("epochfs_backpressure") or 0.0)
                return lines >= LINES

            wait_until(outage_looked_through, timeout=120, interval=0.1,
                       what=f"{LINES} lines of the outage")
            paused = sum(1 for b in seen if b)
            assert paused == 0, (
                f"epochfs_backpressure was 1 at {paused} of {len(seen)} scrapes while the remote "
                "was down (an outage shown as a full cache)")
            log = car.log_text()
            in_outage = _backpressure_lines(log[log.index(OUTAGE):])
            assert not in_outage, f"the outage logged as backpressure: {in_outage[:3]}"
