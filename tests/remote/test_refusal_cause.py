"""What a GCS refusal of the first listing says is wrong
(:func:`~epochfs.sidecar.remote.refusal.refusal_cause`), for the fix the sampler's exit 2 names
(``check the credentials``, ``check that --remote may be read``). gcsfs keeps an answer's status
in ``code`` (its ``HttpError``: a 401 among them) and raises a 403 as a bare
``OSError("Forbidden: <path>\\n<message>")`` with no status at all, so both were found to have
no cause (the line named the flag alone).

The errors are gcsfs's own: the answers of tests/remote/answering_front.py (GCS's status and JSON
error document) turned into exceptions by gcsfs's ``validate_response``, and met off the wire by
the gs:// remote (gcsfs, its retries off) listing through that front, which answers every
request itself (no GCS server is asked).
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from answering_front import ANSWERS, AnsweringFront

from epochfs.sidecar.config import SamplerSettings
from epochfs.sidecar.remote import Denied, RemoteError, open_remote
from epochfs.sidecar.remote.base import CredentialsRefused
from epochfs.sidecar.remote.errors import library_kind, may_answer_later, translate
from epochfs.sidecar.remote.refusal import refusal_cause
from epochfs.sidecar.sampler.refusals import refusal_message

gcsfs_retry = pytest.importorskip("gcsfs.retry", reason="gs:// needs gcsfs (the gcs extra)")

REFUSALS = [("gcs-401", "credentials", "check the credentials the store is given (its key, token or SAS)"),
            ("gcs-403", "access", "check that --remote may be read with these credentials (or by this user)")]
"""(the store's answer: answering_front.ANSWERS, the cause it says, the fix the exit line names)."""


def gcsfs_error(name: str) -> BaseException:
    """What gcsfs raises for the answer ``name``: its ``validate_response`` over the status and
    the body GCS sends."""
    answer = ANSWERS[name]
    with pytest.raises(Exception) as raised:
        gcsfs_retry.validate_response(answer.status, answer.body, "b/bkt/o")
    return raised.value


@pytest.mark.parametrize(("name", "cause", "_fix"), REFUSALS, ids=[n for n, _, _ in REFUSALS])
def test_gcsfs_own_error_says_its_cause(name: str, cause: str, _fix: str) -> None:
    """The error as gcsfs raises it, with nothing typed above it (the listing's own library
    error, as a caller may meet it)."""
    error = gcsfs_error(name)
    assert refusal_cause(error) == cause, repr(error)


@pytest.fixture
def nothing_listens() -> str:
    """An upstream for the front that it never reaches (it answers every request itself)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize(("name", "cause", "fix"), REFUSALS, ids=[n for n, _, _ in REFUSALS])
def test_a_refused_gcs_listing_names_the_fix(name: str, cause: str, fix: str, nothing_listens: str,
                                             tmp_path: Path) -> None:
    """The gs:// listing refused off the wire fails as a :class:`RemoteError` naming the URL
    (as S3's listing does) from a refusal no restart mends (a 401 the credentials'
    :class:`CredentialsRefused`, a 403 :class:`Denied`), and the exit line names the credentials
    for a 401 and the access for a 403."""
    url = "gs://bkt/train"
    with AnsweringFront(upstream=nothing_listens) as front:
        front.answer(name)
        remote = open_remote(url, endpoint_url=front.url)
        try:
            with pytest.raises(RemoteError, match=f"^cannot list {url}: ") as listing:
                list(remote.list())
        finally:
            remote.close()
        assert front.passed == 0
    failure = listing.value
    kind = CredentialsRefused if cause == "credentials" else Denied
    assert type(translate(failure, library_kind)) is kind, repr(failure)
    assert not may_answer_later(failure)
    assert refusal_cause(failure) == cause
    line = refusal_message(SamplerSettings(remote=url, cache=tmp_path), failure)
    assert line.startswith(f"--remote: cannot list {url}: "), line
    assert line.endswith(f"; {fix}"), line
