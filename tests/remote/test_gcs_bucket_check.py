"""A gs:// prefix that lists no object asks whether its bucket exists (a typo'd bucket is refused at
the start, naming it). When that one question met a passing outage of the store (a 503), the
answer was swallowed: the prefix was taken for empty and the sampler idled for ever on a bucket
that does not exist. Now an outage fails the listing as any of its requests would (the start exits
75, to be tried again), and credentials that may list the bucket but not read its metadata still
leave it an empty prefix.

The store is a small GCS JSON API server here (gcsfs speaks to it as to GCS): its listing of the
prefix answers ``list_status``, the bucket's metadata ``meta_status``.
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from common import serving_http

from epochfs.sidecar.remote import open_remote

pytest.importorskip("gcsfs", reason="gs:// needs gcsfs (the gcs extra)")

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
ENV = {k: v for k, v in os.environ.items() if not k.startswith(("EPOCHFS_", "GOOGLE_"))}
ENV["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"  # no gRPC look-up of the bucket's type


def _store(meta_status: int, bucket_exists: bool) -> type[http.server.BaseHTTPRequestHandler]:
    """GCS's JSON API for one bucket ``bkt``: none of its objects under ``data/`` (404 for any
    listing when it does not exist), its metadata answers ``meta_status``."""

    class Store(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, doc: dict[str, object]) -> None:
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?")[0].rstrip("/")
            if path.endswith("/b/bkt/o"):
                if bucket_exists:  # its objects lie under other/, none under the prefix
                    other = {} if "prefix=data" in self.path else {"prefixes": ["other/"]}
                    self._send(200, {"kind": "storage#objects", **other})
                else:
                    self._send(404, {"error": {"code": 404, "message": "No such bucket."}})
            elif path.endswith("/b/bkt"):
                message = {503: "Backend Error", 403: "does not have storage.buckets.get access"}
                self._send(meta_status, {"error": {"code": meta_status, "message": message[meta_status]}})
            else:
                self._send(404, {"error": {"code": 404, "message": "Not Found"}})

    return Store


def test_an_outage_met_asking_for_the_bucket_is_tried_again_not_an_empty_prefix(tmp_path: Path) -> None:
    with serving_http(_store(503, bucket_exists=False)) as endpoint:
        run = subprocess.run([EPOCHFS, "sample", "--remote", "gs://bkt/data", "--endpoint-url", endpoint,
                              "--cache", str(tmp_path / "cache")], env=ENV, capture_output=True,
                             text=True, timeout=120)
    assert run.returncode == 75, run.stderr[-2000:]
    assert "the remote cannot be reached now: cannot list gs://bkt/data" in run.stderr, run.stderr[-2000:]


def test_a_bucket_whose_metadata_may_not_be_read_is_an_empty_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials that may list the bucket but not read its metadata (a 403 there): the prefix is
    empty, not a refusal nor an outage (gcsfs tells the bucket by listing its root instead)."""
    monkeypatch.setenv("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    with serving_http(_store(403, bucket_exists=True)) as endpoint:
        remote = open_remote("gs://bkt/data", endpoint_url=endpoint)
        try:
            assert list(remote.list()) == []
        finally:
            remote.close()
