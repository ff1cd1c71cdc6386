"""A sampler killed (-9) mid-outage leaves its outage record in the index; the next sampler on the
cache removes it at its start, so a start with a good remote shows no outage: not in the index,
not in ``epochfs status``. The next run never meets an outage of its own (its breaker never opens
nor closes), so nothing else would ever remove the dead run's record.

Real parts: the ``epochfs sample`` and ``epochfs status`` commands against moto behind a proxy
that refuses the credentials (S3's ``403 InvalidAccessKeyId``) while told to.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from common import S3Server, put_objects, wait_until
from refusing_proxy import refusing_proxy
from sampler_helpers import EPOCHFS, SamplerProc, start_sampler

from epochfs.sidecar.store import Meta, Store
from epochfs.sidecar.store.outage import Outage, parse

COUNT = 24
CAUSE = "remote refuses the credentials since "


def _record(cache: Path) -> Outage | None:
    with Store(cache) as store:
        return parse(store.meta(Meta.OUTAGE))


def _status(cache: Path, *args: str) -> Any:
    done = subprocess.run([EPOCHFS, "status", "--cache", str(cache), *args], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout) if args else done.stdout


def _all_cached(sp: SamplerProc) -> bool:
    if not sp.alive():
        raise AssertionError(f"sampler exited {sp.proc.returncode}:\n{sp.log_text()[-3000:]}")
    return sp.stats()["samples"] == COUNT


@pytest.mark.long
def test_a_start_after_kill_mid_outage_shows_no_outage(s3: S3Server, tmp_path: Path) -> None:
    put_objects(s3, "outage", {f"train/{i:05d}.bin": os.urandom(20_000) for i in range(COUNT)})
    cache = tmp_path / "cache"
    with refusing_proxy(s3.endpoint) as proxy:
        args = ("--endpoint-url", proxy.url, "--capacity", "100Mi", "--max-rate", "100Ki",
                "--concurrency", "4")
        sp = start_sampler(cache, "s3://outage/train", *args)
        try:
            wait_until(lambda: sp.stats()["samples"] >= 4, what="a few samples fetched")
            proxy.refusing = True
            outage = wait_until(lambda: _record(cache), timeout=60, what="the outage in the index")
            assert outage.cause == "credentials_refused" and outage.pid == sp.proc.pid, outage
            doc = _status(cache, "--json")
            assert doc["outage_cause"] == "credentials_refused", doc
            assert doc["sampler_retrying"].startswith(CAUSE), doc
            sp.proc.send_signal(signal.SIGKILL)
            sp.proc.wait(timeout=30)
        finally:
            sp.stop()
        assert _record(cache) is not None, "a kill -9 leaves the record (what the next start meets)"
        doc = _status(cache, "--json")
        assert doc["sampler_running"] is False and "outage" not in doc, doc

        proxy.refusing = False
        sp = start_sampler(cache, "s3://outage/train", *args)
        try:
            wait_until(lambda: _all_cached(sp), timeout=90, what="every key cached by the next run")
            assert _record(cache) is None, "the dead run's outage is still in the index"
            doc = _status(cache, "--json")
            assert doc["sampler_running"] is True, doc
            assert "outage" not in doc and "sampler_retrying" not in doc, doc
            assert "sampler:" not in _status(cache)
        finally:
            rc = sp.stop()
    assert rc == 0, sp.log_text()[-3000:]
    assert "clearing the remote outage the last run left" in sp.log_text()
