"""``gs://`` read without credentials (a public bucket): an object an anonymous caller may not read
is denied and skipped, and the rest is fetched. GCS answers such a read with a 401 whose message
starts ``Anonymous caller does not have storage.objects.get access``: a caller with no credentials
has none to refuse or rotate, so it is one object's denial, never the credentials' refusal (an
outage that keeps the keys and pauses for ever: 1 of 10 readable objects fetched in 40 s, the
other keys retried behind pauses, ``EpochfsRemoteCredentialsRefused`` set).

Real parts: fake-gcs-server, a front (tests/remote/credential_front.py) answering anonymous reads
of ``priv/`` objects with GCS's own 401 body (fake-gcs-server checks no permissions), gcsfs with
no credentials (anonymous), and ``epochfs sample`` against it.
"""

from __future__ import annotations

import json
import os
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from common import wait_until
from emulators import running_fake_gcs
from remote.answering_front import Answer
from remote.credential_front import RefusingFront
from sampler_helpers import SamplerProc, running_sampler

from epochfs.sidecar.download import failure_kind, is_unavailable
from epochfs.sidecar.remote import open_remote
from epochfs.sidecar.remote.base import Denied
from epochfs.sidecar.remote.errors import may_answer_later
from epochfs.sidecar.store import Meta, Store

PUBLIC, PRIVATE = 10, 40
SAYS = ("Anonymous caller does not have storage.objects.get access to the Google Cloud Storage "
        "object. Permission 'storage.objects.get' denied on resource (or it may not exist).")
ANONYMOUS_DENIED = Answer(401, "Unauthorized", (("Content-Type", "application/json; charset=UTF-8"),),
                          json.dumps({"error": {"code": 401, "message": SAYS, "errors": [
                              {"message": SAYS, "domain": "global", "reason": "required",
                               "locationType": "header", "location": "Authorization"}]}}).encode())
"""GCS's answer to an anonymous caller without ``storage.objects.get`` on an object."""
STORE_VARIABLES = ("GOOGLE_", "STORAGE_EMULATOR", "GCE_", "CLOUDSDK_", "GCSFS_")


@pytest.fixture
def anonymous(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No Google credentials anywhere gcsfs looks (environment, home, metadata server): anonymous."""
    for name in [n for n in os.environ if n.startswith(STORE_VARIABLES)]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("NO_GCE_CHECK", "true")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def _post(url: str, body: bytes, content_type: str) -> None:
    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type})
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


@pytest.fixture(scope="module")
def bucket(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """fake-gcs-server's endpoint and a bucket of ``pub/`` and ``priv/`` objects."""
    with running_fake_gcs(tmp_path_factory.mktemp("gcs")) as endpoint:
        name = f"anon-{uuid.uuid4().hex[:12]}"
        _post(f"{endpoint}/storage/v1/b?project=test", json.dumps({"name": name}).encode(),
              "application/json")
        keys = [f"pub/{i:03d}.bin" for i in range(PUBLIC)] + [f"priv/{i:03d}.bin" for i in range(PRIVATE)]
        for key in keys:
            _post(f"{endpoint}/upload/storage/v1/b/{name}/o?uploadType=media&name={quote(key, safe='')}",
                  os.urandom(2000), "application/octet-stream")
        yield endpoint, name


def private_to_anonymous(_method: str, path: str, token: str) -> Answer | None:
    """GCS's 401 to an anonymous read of a ``priv/`` object (its metadata or its body)."""
    return ANONYMOUS_DENIED if not token and "/o/priv%2F" in path else None


def test_an_anonymous_read_refused_by_gcs_is_one_objects_denial(
        bucket: tuple[str, str], anonymous: None) -> None:
    """The remote types the 401 of each read, ranged read and size as :class:`Denied` (skipped,
    not an outage), never as the credentials' refusal a restart would meet again."""
    endpoint, name = bucket
    with RefusingFront(upstream=endpoint, rule=private_to_anonymous) as front:
        remote = open_remote(f"gs://{name}", endpoint_url=front.url)
        try:
            calls = (lambda: remote.open("priv/001.bin").read(10),
                     lambda: remote.read_range("priv/001.bin", 0, 10),
                     lambda: remote.object_size("priv/001.bin"))
            for call in calls:
                with pytest.raises(Denied, match="Anonymous caller") as denied:
                    call()
                assert failure_kind(denied.value) is Denied and not is_unavailable(denied.value)
                assert not denied.value.credentials and not may_answer_later(denied.value)
            assert len(remote.read_range("pub/001.bin", 0, 10)) == 10
        finally:
            remote.close()
    assert front.seen("", 401) >= len(calls)


def _settled(sp: SamplerProc) -> bool:
    """Every key cached or skipped, or the sampler paused on the credentials (the failure)."""
    if not sp.alive():
        raise AssertionError(f"sampler exited {sp.proc.returncode}:\n{sp.log_text()[-3000:]}")
    stats = sp.stats()
    done = int(stats["samples"]) + int(stats["skipped_total"]) >= PUBLIC + PRIVATE
    return done or "refuses the credentials" in sp.log_text()


def test_an_anonymous_sampler_skips_what_it_may_not_read_and_fetches_the_rest(
        bucket: tuple[str, str], anonymous: None, tmp_path: Path) -> None:
    endpoint, name = bucket
    cache = tmp_path / "cache"
    with RefusingFront(upstream=endpoint, rule=private_to_anonymous) as front, \
            running_sampler(cache, f"gs://{name}", "--endpoint-url", front.url, "--capacity", "10Mi",
                            "--concurrency", "4") as sp:
        wait_until(lambda: _settled(sp), timeout=90, what="every key cached or skipped")
        stats = sp.stats()
        with Store(cache) as store:
            record = store.meta(Meta.OUTAGE)
        log = sp.log_text()
    assert "refuses the credentials" not in log, log[-3000:]
    assert stats["samples"] == PUBLIC and stats["skipped_total"] == PRIVATE, (stats, log[-3000:])
    assert stats["failed_total"] == PRIVATE, stats
    assert record is None, record
    assert log.count("skipping 'priv/") == PRIVATE and "Denied: HttpError: Anonymous caller" in log
    assert front.seen("", 401) >= PRIVATE and not any(token for token, _ in front.answers), \
        "the sampler read anonymously"
