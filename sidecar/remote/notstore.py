"""Answers that are not the store's: a 2xx answer to a listing (or an index) in another format
than the store's API sends, a web page most often (a web console on the wrong port, a captive
portal, a single-page app that answers every path, an egress proxy's notice).

Such an answer reached the endpoint and was answered, so the start must not call the remote
unreachable (exit 75, started again for ever) nor read the page as data (an index's lines as
keys): :class:`NotTheStore` says which endpoint answered what, and
:func:`~.errors.may_answer_later` takes it for a setting to fix (exit 2). Met mid-run (a proxy's
page for one request after good ones), it is :class:`~.base.Transient` as any garbled answer,
and the listing beside the sampler asks again.

One rule for every backend: an answer is foreign when it is a web page (``Content-Type:
text/html``, or a body that opens as HTML) or when it could not be parsed and its Content-Type is
none of the store's formats. An answer in the store's own format that does not parse (cut short,
garbled) stays the backend's transient failure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import IO, Any
from urllib.parse import urlsplit

from epochfs.sidecar.remote.base import RemoteError, Transient

WEB_TYPES = frozenset({"text/html", "application/xhtml+xml"})
"""Content-Types of a web page: never a store's listing nor an index of keys."""
HTML_OPENINGS = (b"<!doctype html", b"<html", b"<head", b"<body")
"""How an HTML page's body opens (lower-cased, after blanks), whatever its Content-Type says."""


class NotTheStore(Transient):
    """A 2xx answer in another format than the store's (a web page): retried where it is met
    mid-run, but a setting to fix at the start (:func:`~.errors.may_answer_later`)."""


def media_type(content_type: str | None) -> str:
    """The media type of a Content-Type header, lower-cased, without its parameters."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def is_web_page(content_type: str | None, body: bytes) -> bool:
    """Whether an answer is a web page: by its Content-Type, or by how its body opens."""
    head = body[:256].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    return media_type(content_type) in WEB_TYPES or head.startswith(HTML_OPENINGS)


def is_foreign(content_type: str | None, body: bytes, formats: tuple[str, ...]) -> bool:
    """Whether an answer that did not parse as the store's is another kind of document: a web
    page, or a Content-Type that names none of ``formats`` (``("xml",)``: ``application/xml``,
    ``text/xml``). No Content-Type at all says nothing: a garbled answer of the store's."""
    kind = media_type(content_type)
    return is_web_page(content_type, body) or (bool(kind) and not any(f in kind for f in formats))


def endpoint_of(url: str) -> str:
    """The scheme and host of ``url`` (never its userinfo, path or query): what a message names."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}" if parts.netloc else url


def not_the_store(endpoint: str, status: int, content_type: str | None, expected: str) -> NotTheStore:
    """The failure of an answer that is not ``expected`` (``an S3 ListObjectsV2 answer``), worded
    for the user who pointed ``--endpoint-url`` at the wrong port."""
    said = media_type(content_type) or "with no Content-Type"
    return NotTheStore(f"the endpoint {endpoint_of(endpoint)} answered {status} {said}, not {expected}: "
                       "is --endpoint-url the store's API port?", status=status)


def json_answer(headers: Mapping[str, str], body: bytes, *, endpoint: str, status: int, expected: str) -> Any:
    """``body`` parsed as JSON (GCS's JSON API); a foreign answer raises :class:`NotTheStore`, a
    JSON answer that does not parse (cut short, garbled) :class:`~.base.Transient`, as S3's and
    Azure's garbled pages are."""
    try:
        return json.loads(body)
    except ValueError as e:
        content_type = headers.get("Content-Type")
        if is_foreign(content_type, body, ("json",)):
            raise not_the_store(endpoint, status, content_type, expected) from e
        raise Transient(f"a garbled answer from {endpoint_of(endpoint)} ({e}): worth another try") from e


def azure_listing_check(endpoint: str) -> Any:
    """A ``raw_response_hook`` for the Azure SDK's ``List Blobs`` requests: a 2xx answer that is a
    web page, or whose Content-Type is not XML, raises :class:`NotTheStore` before the SDK reads
    it (the SDK's own failure: ``Unable to deserialize to object: type``, with no answer kept)."""

    def check(pipeline_response: Any) -> None:
        answer = pipeline_response.http_response
        status = int(answer.status_code)
        content_type = answer.headers.get("Content-Type")
        if 200 <= status < 300 and media_type(content_type) and is_foreign(content_type, b"", ("xml",)):
            raise not_the_store(endpoint, status, content_type, "an Azure Blob List Blobs answer")

    return check


def refuse_web_index(shown: str, f: Any, stream: IO[bytes]) -> None:
    """Raise :class:`RemoteError` from :class:`NotTheStore` when the index ``shown`` was answered
    with a web page (Content-Type ``text/html``, or a first non-blank line that opens with ``<``):
    its lines would be taken for keys and the page served back as samples. ``f``: fsspec's HTTP
    file (its answer's headers: ``f.r.headers``); ``stream``: its body, gunzipped where stored so."""
    content_type = (getattr(getattr(f, "r", None), "headers", None) or {}).get("Content-Type")
    peek = getattr(stream, "peek", None)
    head = (peek(4096) if peek is not None else b"")[:4096].lstrip(b"\xef\xbb\xbf \t\r\n")
    if media_type(content_type) in WEB_TYPES or head.startswith(b"<"):
        said = f"Content-Type {media_type(content_type) or 'none'}"
        raise RemoteError(f"the index {shown} answered an HTML page ({said}), not an index of keys: "
                          "check --remote/--index") from NotTheStore(f"{shown}: an HTML page", status=200)


__all__ = [
    "HTML_OPENINGS",
    "WEB_TYPES",
    "NotTheStore",
    "azure_listing_check",
    "endpoint_of",
    "is_foreign",
    "is_web_page",
    "json_answer",
    "media_type",
    "not_the_store",
    "refuse_web_index",
]
