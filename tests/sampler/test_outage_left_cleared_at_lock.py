"""The outage record a sampler killed mid-outage left in the index is removed as soon as the next
sampler holds the cache's lock, before it asks the remote anything: while that start waits on the
remote (a slow listing of a big bucket, a remote still down), ``epochfs status --cache`` sees a
sampler holding the lock, and a record left there would be shown as the running sampler's outage
(it was, for the whole start: cleared only once the fetch loop was made).

Real parts: ``epochfs sample`` against fake-gcs-server (anonymous ``gs://``) behind a front
(tests/remote/credential_front.py) that holds every listing request until told to let it through,
and the ``epochfs status`` command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from common import wait_until
from emulators import running_fake_gcs
from remote.answering_front import Answer
from remote.credential_front import RefusingFront
from sampler_helpers import EPOCHFS, running_sampler

from epochfs.sidecar.store import Meta, Store
from epochfs.sidecar.store.outage import Outage, parse

STORE_VARIABLES = ("GOOGLE_", "STORAGE_EMULATOR", "GCE_", "CLOUDSDK_", "GCSFS_")


@pytest.fixture
def anonymous(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No Google credentials anywhere gcsfs looks: an anonymous caller, as a public bucket's."""
    for name in [n for n in os.environ if n.startswith(STORE_VARIABLES)]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def _post(url: str, body: bytes, content_type: str) -> None:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type})
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


@pytest.fixture
def bucket(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """fake-gcs-server's endpoint and a bucket of a few objects."""
    with running_fake_gcs(tmp_path) as endpoint:
        name = f"left-{uuid.uuid4().hex[:12]}"
        _post(f"{endpoint}/storage/v1/b?project=test", json.dumps({"name": name}).encode(),
              "application/json")
        for i in range(3):
            key = quote(f"d/{i}.bin", safe="")
            _post(f"{endpoint}/upload/storage/v1/b/{name}/o?uploadType=media&name={key}", b"x" * 100,
                  "application/octet-stream")
        yield endpoint, name


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


def leave_record(cache: Path) -> None:
    """What a sampler killed with -9 mid-outage leaves in the index: its outage record."""
    left = Outage(cause="credentials_refused", since=round(time.time() - 60, 3), objects=9,
                  error="CredentialsRefused: HttpError: Invalid Credentials, 401", pid=dead_pid())
    with Store(cache, create=True) as store:
        store.set_meta(Meta.OUTAGE, left.to_json())


class HeldListing:
    """A front's rule that holds every listing request (``GET .../o?...``) until :meth:`release`."""

    def __init__(self) -> None:
        self.asked = threading.Event()
        self._go = threading.Event()

    def __call__(self, method: str, path: str, _token: str) -> Answer | None:
        if method == "GET" and "/o?" in path:
            self.asked.set()
            self._go.wait(timeout=120)
        return None

    def release(self) -> None:
        self._go.set()


def _status(cache: Path) -> Any:
    done = subprocess.run([EPOCHFS, "status", "--json", "--cache", str(cache)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_a_start_waiting_on_the_listing_shows_no_outage_of_a_dead_run(
        bucket: tuple[str, str], anonymous: None, tmp_path: Path) -> None:
    endpoint, name = bucket
    cache = tmp_path / "cache"
    leave_record(cache)
    held = HeldListing()
    with RefusingFront(upstream=endpoint, rule=held) as front:
        try:
            with running_sampler(cache, f"gs://{name}/d", "--endpoint-url", front.url) as sp:
                assert held.asked.wait(timeout=60), f"no listing request:\n{sp.log_text()[-3000:]}"
                doc = _status(cache)
                with Store(cache) as store:
                    record = parse(store.meta(Meta.OUTAGE))
                held.release()
                wait_until(lambda: sp.stats()["samples"] == 3, timeout=60, what="the objects cached")
                log = sp.log_text()
        finally:
            held.release()
    assert doc["sampler_running"] is True, doc
    assert "outage" not in doc and "outage_cause" not in doc and "sampler_retrying" not in doc, doc
    assert record is None, f"the dead run's record is still in the index while the start lists: {record}"
    assert "clearing the remote outage the last run left" in log, log[-3000:]
