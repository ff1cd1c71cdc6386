"""The webhook under a burst of pod creations: reviews beyond the slots wait briefly instead of a 429
at once, and a 429 carries ``Retry-After`` and counts as ``busy``, not ``error``.

Before: 16 reviews were decided at once and the next were answered 429 at once, without
``Retry-After``, which client-go's REST client (the API server's, to call webhooks) needs to retry
a 429: with ``failurePolicy: Fail`` a JobSet's or an Indexed Job's pods created together were
refused; and the 429s counted as ``error``, toward ``EpochfsWebhookErrors``. Served for real: the
profiles the real helm renders, AdmissionReview v1 over HTTPS to `epochfs webhook`'s server.
"""

from __future__ import annotations

import collections
import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_webhook_server import Served, docs, give_back, hold_slots, profiles, serve  # noqa: F401  (fixtures)
from webhook_helpers import admission_review, job, job_pod

from epochfs.sidecar.webhook.profiles import Profile
from epochfs.sidecar.webhook.slots import QUEUE_SECONDS, api_timeout, queue_wait

ROOT = Path(__file__).resolve().parents[2]


def _post(served: Served, path: str = "/mutate") -> tuple[int, dict[str, str], bytes]:
    """One review by hand, so the answer's headers are seen too."""
    conn = served.client.connection()
    try:
        body = json.dumps(admission_review(job_pod(job()))).encode()
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def test_a_burst_beyond_the_slots_is_served_whole(
    profiles: dict[str, Profile],  # noqa: F811
    tmp_path: Path,
) -> None:
    """32 reviews at once on one slot: every one answered 200 (the queue's wait is made long, so
    a loaded test machine decides them all within it)."""
    for served in serve(profiles, tmp_path, max_in_flight=1, queue_seconds=25.0):
        before = served.counts()
        with ThreadPoolExecutor(32) as pool:
            answers = list(pool.map(_post, [served] * 32))
        statuses = collections.Counter(status for status, _, _ in answers)
        assert statuses == {200: 32}
        after = served.counts()
        assert {k: after[k] - before[k] for k in ("mutated", "busy", "error")} == {
            "mutated": 32,
            "busy": 0,
            "error": 0,
        }


@pytest.mark.parametrize(
    "options", [{"queue_seconds": 0.2}, {"max_waiting": 0}], ids=["waited-too-long", "queue-full"]
)
def test_a_review_not_served_in_time_is_429_with_retry_after_and_counted_busy(
    profiles: dict[str, Profile],  # noqa: F811
    tmp_path: Path,
    options: dict[str, Any],
) -> None:
    for served in serve(profiles, tmp_path, max_in_flight=1, **options):
        slots = hold_slots(served.server)
        try:
            before = served.counts()
            status, headers, body = _post(served)
            assert status == 429 and b"busy" in body, body
            assert headers.get("Retry-After") == "1", headers
            after = served.counts()
            assert {k: after[k] - before[k] for k in ("busy", "error")} == {"busy": 1, "error": 0}
        finally:
            give_back(served.server, slots)
        assert _post(served)[0] == 200  # the slot back: served again


@pytest.mark.parametrize(
    ("param", "seconds"),
    [
        (None, QUEUE_SECONDS),
        ("10s", QUEUE_SECONDS),
        ("30s", QUEUE_SECONDS),
        ("1m0s", QUEUE_SECONDS),
        ("1s", 1 / 3),
        ("1.5s", 0.5),
        ("600ms", 0.2),
        ("soon", QUEUE_SECONDS),
        ("0s", QUEUE_SECONDS),
    ],
)
def test_the_wait_stays_inside_the_api_servers_timeout(param: str | None, seconds: float) -> None:
    """The API server passes the configuration's timeoutSeconds as ``?timeout=<Go duration>``: a
    review waits at most a third of it, so the 429 still reaches the API server in time to retry."""
    assert queue_wait(QUEUE_SECONDS, param) == pytest.approx(seconds)
    assert QUEUE_SECONDS <= 10 / 3  # the chart's default timeoutSeconds, 10
    assert api_timeout("1h2m3.5s") == pytest.approx(3723.5)


def test_busy_answers_are_not_errors_for_the_alert() -> None:
    """EpochfsWebhookErrors counts error and refused answers; busy ones (retried by the API server)
    are left out of its numerator."""
    rules = yaml.safe_load((ROOT / "helm/epochfs/alerts/epochfs.rules.yaml").read_text())
    alerts = {r.get("alert"): r["expr"] for g in rules["groups"] for r in g["rules"]}
    expr = alerts["EpochfsWebhookErrors"]
    [matcher] = re.findall(r'result=~"([^"]+)"', expr)
    assert re.fullmatch(matcher, "error") and not re.fullmatch(matcher, "busy")
