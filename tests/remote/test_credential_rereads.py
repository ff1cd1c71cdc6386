"""S3's refusal of the credentials themselves is the remote's as a whole (kept, never a reason to
skip a key), read again at a bounded rate, and still a refusal at the start.

The kinds are botocore's own exceptions as a real client raises them against moto behind a front
that answers S3's error documents (tests/remote/answering_front.py); the rate is
:class:`~epochfs.sidecar.remote.s3creds.CredentialRereads` with a clock the test moves.
"""

from __future__ import annotations

import pytest
from answering_front import AnsweringFront
from common import S3Server, put_objects

from epochfs.sidecar.download import failure_kind, is_unavailable
from epochfs.sidecar.remote.base import CredentialsRefused, Denied
from epochfs.sidecar.remote.errors import may_answer_later
from epochfs.sidecar.remote.s3 import S3Remote
from epochfs.sidecar.remote.s3creds import REREAD_EVERY, CredentialRereads


def _failure(remote: S3Remote, key: str) -> BaseException:
    with pytest.raises(Exception) as info:
        remote.open(key).close()
    return info.value


def test_a_refused_key_is_kept_and_read_again_at_a_bounded_rate(s3: S3Server) -> None:
    """``InvalidAccessKeyId`` on a GET and on the listing: the credentials' refusal (retried,
    counted toward an outage: the key is kept), which has the client made again; ``AccessDenied``
    stays one object's denial. At the start both are refusals (exit 2), not a store still
    starting."""
    put_objects(s3, "bkt", {"d/a.bin": b"a" * 100})
    with AnsweringFront(upstream=s3.endpoint) as front:
        remote = S3Remote(url="s3://bkt/d", endpoint_url=front.url)
        try:
            front.answer("s3-invalid-key")
            refused = _failure(remote, "a.bin")
            with pytest.raises(Exception) as listing:
                list(remote.list())
            generation = remote._creds.generation
            front.answer("s3-access-denied")
            denied = _failure(remote, "a.bin")
            assert remote._creds.generation == generation, "a denial of one object reads nothing again"
            front.pass_all()
            reader = remote.open("a.bin")
            reader.close()
        finally:
            remote.close()
    assert failure_kind(refused) is CredentialsRefused and is_unavailable(refused), repr(refused)
    assert "InvalidAccessKeyId" in str(refused)
    assert generation == 1, "read again once for the GET; the listing's refusal came within the bound"
    assert failure_kind(denied) is Denied
    assert not may_answer_later(listing.value) and not may_answer_later(refused)


def test_rereads_are_bounded_whatever_the_number_of_refusals() -> None:
    """32 downloads refused at once make one new client; the next comes ``REREAD_EVERY`` later."""
    now = [100.0]
    forgotten: list[int] = []
    rereads = CredentialRereads(lambda: forgotten.append(1), clock=lambda: now[0])
    refusal = CredentialsRefused("k: HTTP 403 InvalidAccessKeyId", status=403)
    assert [rereads.refused(refusal) for _ in range(32)].count(True) == 1
    now[0] += REREAD_EVERY - 0.1
    assert not rereads.refused(refusal)
    now[0] += 0.1
    assert rereads.refused(refusal) and len(forgotten) == 2 == rereads.generation
    assert not rereads.refused(Denied("k: HTTP 403 AccessDenied", status=403))
