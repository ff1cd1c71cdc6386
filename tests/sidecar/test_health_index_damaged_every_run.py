"""``/healthz`` when the cache's index is damaged on every run of the sampler (a failing disk, a
volume that corrupts writes): restarting the sampler mends nothing, so after three index-damage
exits in a row with no good run between (one that cut an epoch, or ran 30 s) the liveness probe
fails with a reason that names the damage (and the sidecar logs it); the sampler keeps being
restarted, and the first good run makes ``/healthz`` answer 200 again (logged too).

The damage is real: pages of ``index.sqlite`` garbled beside the real sidecar, each time just
after a start of the sampler has replaced the index (its one log line) and before that run cuts an
epoch, so every run meets a damaged index and exits 74.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from common import S3Server, put_objects, random_objects, wait_until
from sidecar_helpers import Sidecar, running_sidecar
from test_health_index_damage import (
    RESET_LINE,
    HealthPoller,
    garble_leaves,
    members_of_live_epochs,
    running,
    sampler_of,
)

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]

BUCKET = "data"
STREAK = 3
"""Index-damage exits in a row after which /healthz fails (config.INDEX_DAMAGES_UNHEALTHY)."""
MAX_DAMAGES = 8
# Cuts every 3 s: a start of the sampler replaces the index, and its loop runs for seconds before
# its first cut, the window in which the test garbles the fresh index (a cut proves a run good).
# Its progress line comes every second, so the garbling has 2 s (a run that cut first is counted
# good, and the test damages again: MAX_DAMAGES); every cut waited for here is one interval.
EXTRA = ("--capacity", "2Mi", "--min-samples", "10", "--cut-interval", "3", "--keep-epochs", "2",
         "--in-use-seconds", "2", "--concurrency", "4", "--max-rate", "1Mi", "--scrub-rate", "0")


LOOPING = "sample(s) fetched this run"
"""The sampler loop's progress line (every second here): the run is past its start, where a damage
met is a crash (exit 1), not the index-damage exit this test is about."""


def since_last_reset(car: Sidecar) -> str:
    text = car.log_text()
    return text[text.rfind(RESET_LINE) + 1:]


def index_failures(answers: list[tuple[int, str]]) -> list[str]:
    """The reasons of the /healthz answers that failed on the index."""
    out = []
    for code, body in answers:
        reason = json.loads(body).get("reason", "") if code == 503 and body else ""
        if "index" in reason:
            out.append(reason)
    return out


@pytest.mark.long
def test_healthz_fails_after_three_runs_in_a_row_meet_a_damaged_index_and_heals(
        s3: S3Server, tmp_path: Path) -> None:
    put_objects(s3, BUCKET, random_objects(600, 8 * 1024))
    with running_sidecar(tmp_path, remote=f"s3://{BUCKET}", endpoint=s3.endpoint, extra=EXTRA) as car:
        wait_until(lambda: running(car) and members_of_live_epochs(car), timeout=60,
                   what="the sampler's loop running, the members files written")
        with HealthPoller(car) as poller:
            damages = 0
            while not index_failures(poller.answers):
                # A run that cut an epoch before it met its damage (a slow machine) is a good one
                # and starts the count again: the test goes on damaging, MAX_DAMAGES at most.
                assert damages < MAX_DAMAGES, f"/healthz never failed on the index: {car.health()}"
                if damages:
                    # In the run's loop, before its first cut (3 s after its start).
                    wait_until(lambda: LOOPING in since_last_reset(car), timeout=60,
                               what=f"the sampler's loop after start {damages}")
                resets = car.log_text().count(RESET_LINE)
                garble_leaves(car.cache)
                damages += 1
                # The sampler meets it and exits 74; its next start replaces the index, which is
                # garbled again (the next turn) before that run's first cut.
                wait_until(lambda n=resets: car.log_text().count(RESET_LINE) > n, timeout=60,
                           what=f"index damage {damages} replaced")
            streak = car.metric("epochfs_index_damage_streak")
            answers = list(poller.answers)
            # Left alone: the run now going cuts an epoch, a good run, and /healthz is 200 again.
            wait_until(lambda: car.health()["code"] == 200, timeout=60, what="/healthz 200 after a good run")
        # Not before the third exit in a row: the first failing answer counts three.
        code, body = next((code, body) for code, body in answers if code != 200)
        assert code == 503 and f"damaged {STREAK} times in a row" in json.loads(body).get("reason", ""), body
        assert damages >= STREAK and streak == STREAK, (damages, streak)
        assert sampler_of(car)["crashes"] == 0, car.health()
        assert sampler_of(car)["index_damages"] == 0, car.health()
        assert car.metric("epochfs_index_damage_streak") == 0
        assert (car.metric("epochfs_index_damage_exits_total") or 0) == damages
        # The sidecar's log says when liveness began to fail, and why (the kubelet's event says
        # only "503"), and when it passed again.
        log = car.log_text()
        failing = next((line for line in log.splitlines() if "/healthz fails now" in line), "")
        assert f"damaged {STREAK} times in a row" in failing, log[-3000:]
        assert log.find("/healthz passes again", log.find(failing)) > 0, log[-3000:]
