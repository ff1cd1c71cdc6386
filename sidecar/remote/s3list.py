"""One ``ListObjectsV2`` answer read with :mod:`xml.etree.ElementTree`, for the presigned listing
fast path of :meth:`epochfs.sidecar.remote.s3.S3Remote.list_page`.

Why not botocore: a page through its request and response pipeline (a generic XML-to-shape
parser, then every field through its type handlers and the event hooks) cost 114-126 µs of CPU a
key on the 2-core test machine, under the GIL, in the sampler's own process, where the listers run
beside the fetches; the presigned page read here cost 11-13 µs a key in the same runs
(docs/listing.md has the command).

What botocore does that matters is kept: the request asks for ``encoding-type=url`` (botocore sets
it by default, ``set_list_objects_encoding_type_url``) so that keys with characters XML 1.0 cannot
carry (control characters) still come back, and when the answer says ``EncodingType`` is ``url``
the keys, prefixes and ``StartAfter`` are decoded with ``unquote_plus``, as botocore's
``decode_list_object_v2`` does. XML entities (``&amp;`` ...) and UTF-8 are the parser's.

An error answer is described the way botocore's ``ClientError`` words it (``An error occurred
(NoSuchBucket) when calling the ListObjectsV2 operation (reached max retries: 0): ...``), so a
listing refused on either path says the same thing.
"""

from __future__ import annotations

import http.client
import re
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from urllib.parse import unquote_plus

NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"
_CONTENTS = NS + "Contents"
_COMMON = NS + "CommonPrefixes"
_KEY = NS + "Key"
_SIZE = NS + "Size"
_ETAG = NS + "ETag"
_PREFIX = NS + "Prefix"
_TRUNCATED = NS + "IsTruncated"
_NEXT = NS + "NextContinuationToken"
_ENCODING = NS + "EncodingType"
_START_AFTER = NS + "StartAfter"


NOT_A_SIZE = -1
"""The size of a listed key whose ``<Size>`` is no whole number of bytes (``abc``, ``-5``, empty or
absent): the listing's filter skips that key alone, counted and logged, rather than the page
failing (``int()`` of it) or a size no object has going into the catalog."""
OVER_ANY_OBJECT = -2
"""The size of a listed key whose ``<Size>`` is past :data:`MAX_OBJECT_SIZE`: skipped as
:data:`NOT_A_SIZE` is, under its own reason."""
MAX_OBJECT_SIZE = 10_000 * (5 << 30)
"""The largest object S3 can hold: a multipart upload of at most 10,000 parts of at most 5 GiB
each (about 53.7 TB; AWS documents objects of up to 50 TB). A listed size past it (``10**30``) is
no object's: as a size it would be refused as over the cache's object limit, and, alone in the
listing, stop the sampler blaming ``--capacity``, which no setting could satisfy."""
SIZE_SKIPS = {NOT_A_SIZE: "size not a whole number of bytes",
              OVER_ANY_OBJECT: "size larger than any S3 object (over 10,000 parts of 5 GiB)"}
"""The skip reason of each size that is none (the listing's filter counts skipped keys by it)."""


def listed_size(text: str | None) -> int:
    """A ``<Size>``'s bytes, or :data:`NOT_A_SIZE` / :data:`OVER_ANY_OBJECT` for what is none."""
    text = (text or "").strip()
    return checked_size(int(text)) if text.isascii() and text.isdigit() else NOT_A_SIZE


def checked_size(size: int) -> int:
    """``size`` as a listing gives it (botocore's parsed ``Size``): negative sizes are
    :data:`NOT_A_SIZE`, sizes past :data:`MAX_OBJECT_SIZE` :data:`OVER_ANY_OBJECT`."""
    return NOT_A_SIZE if size < 0 else OVER_ANY_OBJECT if size > MAX_OBJECT_SIZE else size


_NOT_DIGITS = re.compile(rb"<Size>(?!\s*[0-9]+\s*</Size>)[^<]*</Size>|<Size\s*/>")


def readable_sizes(response_dict: dict[str, object], **_: object) -> None:
    """botocore's ``before-parse`` hook of ``ListObjectsV2``: each ``<Size>`` that is not digits is
    written ``-1`` (:data:`NOT_A_SIZE` once :func:`checked_size` reads it). botocore's parser
    takes ``int()`` of every ``Size``, and one ``abc`` would fail the whole page, again at every try:
    a listing that never ends, naming no key. The digits of real pages are left as they are."""
    body = response_dict.get("body")
    if response_dict.get("status_code") == 200 and isinstance(body, bytes) and b"<Size" in body:
        response_dict["body"] = _NOT_DIGITS.sub(b"<Size>-1</Size>", body)


class ListXMLError(ValueError):
    """A 200 answer that is not a ``ListBucketResult`` (garbled, cut short, another document)."""


@dataclass
class ListedXML:
    """The fields of one ``ListObjectsV2`` page that a listing uses (keys decoded)."""

    objects: list[tuple[str, int, str]] = field(default_factory=list)
    """(key, size, ETag without its quotes), in the answer's order."""
    prefixes: list[str] = field(default_factory=list)
    truncated: bool = False
    next_token: str | None = None
    start_after: str | None = None


def parse_list_page(document: bytes) -> ListedXML:
    """The page in ``document`` (a ``ListBucketResult``); raises :class:`ListXMLError` otherwise."""
    try:
        root = ElementTree.fromstring(document)
    except ElementTree.ParseError as e:
        raise ListXMLError(f"unreadable ListObjectsV2 answer: {e}") from e
    if root.tag.rpartition("}")[2] != "ListBucketResult":
        raise ListXMLError(f"not a ListObjectsV2 answer: <{root.tag}>")
    page = ListedXML()
    objects = page.objects
    prefixes = page.prefixes
    encoded = False
    for child in root:
        tag = child.tag
        if tag == _CONTENTS:
            key, size, etag = "", NOT_A_SIZE, ""
            for item in child:
                t = item.tag
                if t == _KEY:
                    key = item.text or ""
                elif t == _SIZE:
                    size = listed_size(item.text)
                elif t == _ETAG:
                    etag = (item.text or "").strip('"')
            objects.append((key, size, etag))
        elif tag == _COMMON:
            for item in child:
                if item.tag == _PREFIX:
                    prefixes.append(item.text or "")
        elif tag == _TRUNCATED:
            page.truncated = (child.text or "").strip().lower() == "true"
        elif tag == _NEXT:
            page.next_token = child.text or None
        elif tag == _ENCODING:
            encoded = (child.text or "").strip() == "url"
        elif tag == _START_AFTER:
            page.start_after = child.text or ""
    if encoded:  # as botocore's decode_list_object_v2: Key, CommonPrefixes' Prefix, StartAfter
        page.objects = [(_decoded(k), s, e) for k, s, e in objects]
        page.prefixes = [_decoded(p) for p in prefixes]
        if page.start_after is not None:
            page.start_after = _decoded(page.start_after)
    return page


def _decoded(value: str) -> str:
    """``unquote_plus(value)`` (botocore's ``unquote_str``), skipped for the common key that holds
    nothing to decode."""
    return unquote_plus(value) if "%" in value or "+" in value else value


def error_fields(document: bytes) -> tuple[str, str]:
    """``(Code, Message)`` of an S3 error document; empty strings for what it does not hold."""
    try:
        root = ElementTree.fromstring(document)
    except ElementTree.ParseError:
        return "", ""
    fields = {child.tag.rpartition("}")[2]: (child.text or "").strip() for child in root}
    return fields.get("Code", ""), fields.get("Message", "")


def client_error_text(status: int, document: bytes, *, operation: str = "ListObjectsV2",
                      retries: int | None = 0) -> str:
    """What botocore's ``ClientError`` says of this error answer: the code (or the status when the
    body holds none, as botocore) and the message (or the status's reason phrase). ``retries``:
    the retries botocore says it reached, None for none said; a client allowed one attempt
    (``total_max_attempts=1``, as :class:`~epochfs.sidecar.remote.s3.S3Remote`'s) says
    ``(reached max retries: 0)`` of every error."""
    code, message = error_fields(document)
    code = code or str(status)
    message = message or http.client.responses.get(status, "")
    reached = f" (reached max retries: {retries})" if retries is not None else ""
    return f"An error occurred ({code}) when calling the {operation} operation{reached}: {message}"


__all__ = ["MAX_OBJECT_SIZE", "NOT_A_SIZE", "NS", "OVER_ANY_OBJECT", "SIZE_SKIPS", "ListXMLError",
           "ListedXML", "checked_size", "client_error_text", "error_fields", "listed_size",
           "parse_list_page", "readable_sizes"]
