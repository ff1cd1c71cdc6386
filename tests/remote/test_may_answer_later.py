"""Which failures of the first listing a restart may get past (``epochfs sample`` exits 1: the
sidecar starts it again) and which it would only meet again (exit 2: the sidecar stops with the
reason). Real remotes: moto's S3 server, a port nothing listens on, a host name that does not
resolve, a missing folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from common import S3Server, free_port

from epochfs.sidecar.remote import RemoteError, open_remote
from epochfs.sidecar.remote.errors import may_answer_later


def _first_page_error(url: str, endpoint: str | None) -> RemoteError:
    remote = open_remote(url, endpoint_url=endpoint, concurrency=2, read_timeout=5.0)
    with pytest.raises(RemoteError) as info:
        if hasattr(remote, "list_page"):
            remote.list_page("")
        else:
            list(remote.list())
    return info.value


def test_an_endpoint_nothing_listens_on_may_answer_later(s3: S3Server) -> None:
    assert may_answer_later(_first_page_error("s3://bkt", f"http://127.0.0.1:{free_port()}"))


def test_a_missing_bucket_is_a_refusal(s3: S3Server) -> None:
    e = _first_page_error("s3://no-such-bucket", s3.endpoint)
    assert "NoSuchBucket" in str(e) and not may_answer_later(e)


def test_a_host_that_does_not_resolve_is_a_typo(s3: S3Server) -> None:
    assert not may_answer_later(_first_page_error("s3://bkt", "http://no-such-host.invalid:9000"))


def test_a_missing_folder_is_a_refusal(tmp_path: Path) -> None:
    with pytest.raises(RemoteError) as info:  # open_remote checks the folder
        open_remote(f"file://{tmp_path / 'no-such-folder'}", endpoint_url=None, concurrency=2,
                    read_timeout=5.0)
    assert "is not a folder" in str(info.value) and not may_answer_later(info.value)


def test_an_error_no_rule_knows_is_not_retried() -> None:
    assert not may_answer_later(RemoteError("s3:// needs botocore"))


def test_an_index_url_nothing_listens_on_may_answer_later_and_a_missing_one_is_a_refusal(
        tmp_path: Path) -> None:
    """fsspec reports an http(s) URL it cannot reach as FileNotFoundError: the connection refused
    under it still says a restart may get past it; a 404 does not."""
    import threading
    from http.server import HTTPServer, SimpleHTTPRequestHandler

    from epochfs.sidecar.listing.indexfile import open_stream

    def first_error(url: str) -> RemoteError:
        with pytest.raises(RemoteError) as info, open_stream(url):
            pass
        return info.value

    refused = first_error(f"http://127.0.0.1:{free_port()}/index.jsonl.gz")
    assert "connection refused" in str(refused) and may_answer_later(refused)
    server = HTTPServer(("127.0.0.1", 0), SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        missing = first_error(f"http://127.0.0.1:{server.server_port}/no-such-index.jsonl.gz")
    finally:
        server.shutdown()
        server.server_close()
    assert "HTTP 404" in str(missing) and not may_answer_later(missing)
