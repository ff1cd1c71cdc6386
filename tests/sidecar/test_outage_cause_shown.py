"""An outage of the remote while the sampler runs names its cause where operators look.

The store refusing the credentials mid-run (S3's ``InvalidAccessKeyId`` after a rotated Secret) is
an outage: the sampler keeps the keys and pauses. ``/readyz``, ``/healthz``, the view's
``status.json``, ``epochfs status`` and ``epochfs_remote_outage{cause}`` say so, with the cause,
and stop saying so once the remote answers again, whatever the log level: the sampler records the
outage in the index (its breaker's callback), and nothing reads it from the log. Read from the
log, the outage showed for 3 minutes after the remote was back at ``--log-level WARNING`` (the
breaker's end line is INFO).

Real parts: ``epochfs sidecar`` (folder view: no privilege needed) against moto behind a small
proxy that answers every request 403 ``InvalidAccessKeyId`` while it refuses; the sampler's real
outage breaker wired to a real store as the loop wires them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from common import S3Server, put_objects, random_objects, wait_until
from refusing_proxy import refusing_proxy
from sidecar_helpers import Sidecar, running_sidecar

from epochfs.sidecar.metrics import OUTAGE_CAUSES
from epochfs.sidecar.remote.base import CredentialsRefused
from epochfs.sidecar.sampler.breaker import OutageBreaker, OutageChange
from epochfs.sidecar.sampler.outagerecord import OutageRecord
from epochfs.sidecar.store import Candidate, Meta, Store
from epochfs.sidecar.store.outage import CAUSES, ERROR_MAX, parse
from epochfs.torchclient.layout import read_status

CAUSE = "remote refuses the credentials since "


def _readyz(car: Sidecar) -> dict[str, Any]:
    code, body = car.get("/readyz")
    return json.loads(body) if code else {}


def _status_line(car: Sidecar) -> str:
    """``epochfs status --cache``'s output (the command an operator runs in the sidecar)."""
    out = subprocess.run([sys.executable, "-m", "epochfs.sidecar.cli", "status", "--cache", str(car.cache)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _outage_gauge(car: Sidecar) -> float | None:
    return car.metric("epochfs_remote_outage", cause="credentials_refused")


@pytest.mark.long
@pytest.mark.parametrize("level", ["INFO", "WARNING"])
def test_credentials_refused_mid_run_is_named_until_the_remote_answers_again(
        s3: S3Server, tmp_path: Path, level: str) -> None:
    """The proxy refuses the credentials once the sidecar is ready: the cause shows in every
    place; once it accepts them again it is gone from all of them, at WARNING too, where the
    sampler's ``remote reachable again`` line is not logged."""
    put_objects(s3, "creds", random_objects(200, 20_000))
    (tmp_path / "shared").mkdir()
    folder = tmp_path / "shared" / "view"
    extra = ("--view", "folder", "--link-root", str(tmp_path / "cache" / "objects"),
             "--max-rate", "100Ki", "--concurrency", "4", "--log-level", level)
    with refusing_proxy(s3.endpoint) as proxy, running_sidecar(
            tmp_path, remote="s3://creds", endpoint=proxy.url, extra=extra, mount=folder) as car:
        proxy.refusing = True
        ready = wait_until(lambda: (doc := _readyz(car)).get("outage") and doc, timeout=60,
                           what="/readyz naming the outage")
        assert ready["outage"].startswith(CAUSE), ready
        assert "InvalidAccessKeyId" in ready["outage"] and "keys kept" in ready["outage"], ready
        assert ready["outage_cause"] == "credentials_refused"
        sampler = car.health()["children"]["sampler"]
        assert sampler["outage"].startswith(CAUSE), sampler
        said = wait_until(lambda: ((read_status(folder) or {}).get("sampler_retrying") or ""), timeout=30,
                          what="status.json's sampler_retrying")
        assert said.startswith(CAUSE), said
        assert f"sampler: {CAUSE}" in _status_line(car)
        assert _outage_gauge(car) == 1
        assert car.metric("epochfs_remote_outage", cause="remote_unavailable") == 0
        proxy.refusing = False
        wait_until(lambda: "outage" not in _readyz(car), timeout=90, what="the outage gone from /readyz")
        assert "outage" not in car.health()["children"]["sampler"]
        wait_until(lambda: "sampler_retrying" not in (read_status(folder) or {"sampler_retrying": 1}),
                   timeout=30, what="the outage gone from status.json")
        assert "sampler:" not in _status_line(car)
        assert _outage_gauge(car) == 0
        log = car.log_text()
    assert ("remote reachable again" in log) is (level == "INFO"), "the end line logged at INFO only"
    assert ("remote refuses the credentials (" in log) is True, "the pause line is a WARNING"


def _changes(error: str) -> list[OutageChange]:
    """What the real breaker reports when ``error`` fails 6 objects in a row and then an answer
    comes to a download sent after them."""
    changes: list[OutageChange] = []
    breaker = OutageBreaker(after=5, pause=(2.0, 60.0), on_change=changes.append)
    for i in range(6):
        breaker.sent(f"k{i}", now=float(i))
        breaker.failed(Candidate(f"k{i}", f"s{i}", 10, "v"), error, now=10.0 + i)
    breaker.sent("ok", now=100.0)
    breaker.succeeded("ok")
    return changes


@pytest.mark.parametrize(("error", "cause"), [
    (f"gave up after 5 attempts: {CredentialsRefused.__name__}: ClientError: InvalidAccessKeyId",
     "credentials_refused"),
    ("gave up after 5 attempts: Unavailable: Connection refused", "remote_unavailable"),
])
def test_the_breaker_reports_its_outage_and_its_end(error: str, cause: str) -> None:
    """The breaker tells its owner the cause, the objects in a row and the error at the pause
    (one pause: the sixth failure comes within it), and the end when the remote answers."""
    assert _changes(error) == [OutageChange(cause, 5, error), OutageChange(None)]


def test_the_record_in_the_index_is_redacted_capped_and_removed(tmp_path: Path) -> None:
    """Wired as the loop wires it, the breaker's outage lands in the index as the supervisor and
    status read it (its error redacted and one line, capped), and is removed at the end."""
    secret = "http://user:hunter2@10.0.0.5:9000/b"
    error = f"gave up: {CredentialsRefused.__name__}: cannot GET {secret}\n" + "x" * 2000
    with Store(tmp_path / "cache", create=True) as store:
        breaker = OutageBreaker(after=2, pause=(2.0, 60.0), on_change=OutageRecord(store))
        for i in range(2):
            breaker.sent(f"k{i}", now=float(i))
            breaker.failed(Candidate(f"k{i}", f"s{i}", 10, "v"), error, now=10.0 + i)
        outage = parse(store.meta(Meta.OUTAGE))
        assert outage is not None
        assert (outage.cause, outage.objects, outage.pid) == ("credentials_refused", 2, os.getpid())
        assert "hunter2" not in outage.error and "\n" not in outage.error
        assert len(outage.error) == ERROR_MAX
        assert outage.words.startswith(CAUSE) and "new credentials mend it" in outage.words
        breaker.sent("ok", now=100.0)
        breaker.succeeded("ok")
        assert store.meta(Meta.OUTAGE) is None


def test_a_record_another_run_left_is_removed_at_the_start(tmp_path: Path) -> None:
    """A run killed mid-outage leaves its record: the next run's recorder removes it at once (the
    next run may never pause, and would otherwise show the dead run's outage for good)."""
    with Store(tmp_path / "cache", create=True) as store:
        left = ('{"cause": "credentials_refused", "error": "e", "objects": 9, "pid": 1, '
                '"since": 1700000000.0}')
        store.set_meta(Meta.OUTAGE, left)
        assert parse(store.meta(Meta.OUTAGE)) is not None
        OutageRecord(store)
        assert store.meta(Meta.OUTAGE) is None


def test_the_gauges_causes_are_the_records() -> None:
    """The gauge's bounded ``cause`` label takes the record's causes, which /readyz's
    ``outage_cause`` names."""
    assert set(OUTAGE_CAUSES) == set(CAUSES) == {"credentials_refused", "remote_unavailable"}
