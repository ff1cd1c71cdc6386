"""The synthetic S3 endpoint's answers (:mod:`epochfs.benchmarks.synthetic_s3`): ListObjectsV2
pages (prefix, delimiter, start-after, continuation tokens, max-keys) and their XML, error
documents, and ``Range`` headers; apart from the HTTP server so each can be read (and tested) alone.
"""

from __future__ import annotations

import base64
import bisect
import re
from urllib.parse import quote
from xml.sax.saxutils import escape

from epochfs.benchmarks._synthetic_data import Bucket

MAX_KEYS = 1000
"""S3 answers at most 1,000 keys (and common prefixes) per ListObjectsV2 page."""
LAST_MODIFIED = "2024-01-01T00:00:00.000Z"
_TOP = "\U0010ffff"  # above every character of a key: cp + _TOP is past every key under cp


def list_page(data: Bucket, *, prefix: str = "", delimiter: str = "", resume: str = "",
              max_keys: int = MAX_KEYS) -> tuple[list[str], list[str], str | None]:
    """One ListObjectsV2 page: (keys, common prefixes, where the next page resumes or None).

    ``resume`` is the smallest string the page may list (inclusive); keys and common prefixes
    count together against ``max_keys``, as in S3.
    """
    keys_seq = data.keys()
    keys: list[str] = []
    prefixes: list[str] = []
    pos = bisect.bisect_left(keys_seq, max(prefix, resume))
    last = ""
    while pos < data.count and len(keys) + len(prefixes) < max_keys:
        key = keys_seq[pos]
        if not key.startswith(prefix):
            return keys, prefixes, None
        cut = key.find(delimiter, len(prefix)) if delimiter else -1
        if cut >= 0:
            common = key[:cut + len(delimiter)]
            prefixes.append(common)
            last = common + _TOP
            pos = bisect.bisect_left(keys_seq, last, lo=pos)
        else:
            keys.append(key)
            last = key + "\x00"
            pos += 1
    more = pos < data.count and keys_seq[pos].startswith(prefix)
    return keys, prefixes, (last if more else None)


def _token(resume: str) -> str:
    return base64.urlsafe_b64encode(resume.encode("utf-8", "surrogatepass")).decode()


def _untoken(token: str) -> str:
    return base64.urlsafe_b64decode(token.encode()).decode("utf-8", "surrogatepass")


def resume_point(query: dict[str, str]) -> str:
    """Where a ListObjectsV2 request starts: the smallest string its page may list, the same
    whether it was asked with ``start-after`` or with a continuation token (a page asked twice,
    either way, has the same resume point)."""
    token = query.get("continuation-token")
    start_after = query.get("start-after", "")
    return _untoken(token) if token else (start_after + "\x00" if start_after else "")


def list_xml(data: Bucket, query: dict[str, str]) -> bytes:
    prefix = query.get("prefix", "")
    delimiter = query.get("delimiter", "")
    start_after = query.get("start-after", "")
    token = query.get("continuation-token")
    max_keys = max(0, min(MAX_KEYS, int(query.get("max-keys", MAX_KEYS))))
    resume = resume_point(query)
    keys, prefixes, nxt = list_page(data, prefix=prefix, delimiter=delimiter, resume=resume,
                                    max_keys=max_keys)
    url = query.get("encoding-type") == "url"

    def enc(s: str) -> str:
        return escape(quote(s, safe="/") if url else s)

    out = ['<?xml version="1.0" encoding="UTF-8"?>\n'
           '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">',
           f"<Name>{escape(data.bucket)}</Name><Prefix>{enc(prefix)}</Prefix>",
           f"<KeyCount>{len(keys) + len(prefixes)}</KeyCount><MaxKeys>{max_keys}</MaxKeys>"]
    if delimiter:
        out.append(f"<Delimiter>{enc(delimiter)}</Delimiter>")
    if url:
        out.append("<EncodingType>url</EncodingType>")
    if start_after:
        out.append(f"<StartAfter>{enc(start_after)}</StartAfter>")
    if token:
        out.append(f"<ContinuationToken>{escape(token)}</ContinuationToken>")
    out.append(f"<IsTruncated>{'true' if nxt is not None else 'false'}</IsTruncated>")
    if nxt is not None:
        out.append(f"<NextContinuationToken>{_token(nxt)}</NextContinuationToken>")
    size = data.size
    for key in keys:
        out.append(f"<Contents><Key>{enc(key)}</Key><LastModified>{LAST_MODIFIED}</LastModified>"
                   f"<ETag>&quot;{data.etag(key)}&quot;</ETag><Size>{size}</Size>"
                   "<StorageClass>STANDARD</StorageClass></Contents>")
    for common in prefixes:
        out.append(f"<CommonPrefixes><Prefix>{enc(common)}</Prefix></CommonPrefixes>")
    out.append("</ListBucketResult>")
    return "".join(out).encode()


def error_xml(code: str, message: str, resource: str) -> bytes:
    return (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
            f"<Message>{escape(message)}</Message><Resource>{escape(resource)}</Resource>"
            "<RequestId>synthetic</RequestId></Error>").encode()


_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


def byte_range(header: str | None, size: int) -> tuple[int, int] | str | None:
    """``(first, last)`` of a ``Range`` header for an object of ``size`` bytes; None for no (or an
    ignorable) header; ``"unsatisfiable"`` for a range past the end (416)."""
    if not header:
        return None
    m = _RANGE.match(header.strip())
    if m is None or not (m.group(1) or m.group(2)):
        return None  # S3 ignores a Range it cannot read
    if not m.group(1):  # the last n bytes
        n = int(m.group(2))
        return (max(0, size - n), size - 1) if n and size else "unsatisfiable"
    first = int(m.group(1))
    last = int(m.group(2)) if m.group(2) else size - 1
    if first >= size or last < first:
        return "unsatisfiable"
    return first, min(last, size - 1)


__all__ = ["LAST_MODIFIED", "MAX_KEYS", "byte_range", "error_xml", "list_page", "list_xml", "resume_point"]
