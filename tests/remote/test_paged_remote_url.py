"""A remote that lists in pages says its URL: :class:`~epochfs.sidecar.remote.PagedRemote` declares
``url``, which the listing's walk over its pages names in its errors (a token repeated, an empty
truncated page with no token: ``listing/sources.py``). Every paged remote has one: S3's, the
in-memory one the tests use, and the benchmarks' synthetic bucket, whose walk would otherwise
fail on the attribute the protocol promises."""

from __future__ import annotations

import typing

from epochfs.benchmarks._cached_seed import REMOTE, BucketRemote
from epochfs.benchmarks._keyspaces import KeySpace, parse_spec
from epochfs.sidecar.listing.paged import PagedSource
from epochfs.sidecar.listing.span import Span
from epochfs.sidecar.remote import PagedRemote
from epochfs.sidecar.remote.s3 import S3Remote
from epochfs.sidecar.remote.testing import PagedMemoryRemote


def test_the_protocol_declares_the_url() -> None:
    assert typing.get_type_hints(PagedRemote)["url"] is str


def test_every_paged_remote_has_a_url() -> None:
    assert PagedMemoryRemote({"a": b"x"}, url="memory://here").paged().url == "memory://here"
    assert "url" in typing.get_type_hints(S3Remote)  # S3Remote.paged() is the remote itself
    bucket = BucketRemote(KeySpace(parse_spec("equal:keys=20,folders=2")))
    assert bucket.url == REMOTE
    pages = list(PagedSource(bucket).pages(Span("", "", None), ""))  # walked, named by its url
    assert sum(len(page.objects) for page in pages) == 20
