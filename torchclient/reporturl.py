"""Where the torch client's reports and cut requests go, and which cache they name: the URL
(``EPOCHFS_REPORT_URL``, the mount's status.json, the default) and the ``X-Epochfs-Cache`` header.

Apart from :mod:`.report` (the posting thread) because the cut requests (:mod:`.cutask`) find the
sidecar by the same rules; :mod:`.report` re-exports every name here.
"""

from __future__ import annotations

import json
import os
import urllib.error
from urllib.parse import quote, urlparse

from .layout import REPORT_URL_KEY, SHARD_KEY, read_status

ENV = "EPOCHFS_REPORT_URL"
DEFAULT_URL = "http://127.0.0.1:8080/v1/client-report"

def report_url_from_env() -> str | None:
    """The report URL from ``EPOCHFS_REPORT_URL``, :data:`DEFAULT_URL` when it is unset (None when
    reporting is off)."""
    url = os.environ.get(ENV, DEFAULT_URL).strip()
    if url.lower() in ("", "off", "none", "0", "false"):
        return None
    if urlparse(url).scheme not in ("http", "https"):
        raise ValueError(f"EPOCHFS_REPORT_URL must be an http(s) URL or 'off', got {url!r}")
    return url


def report_url_from_status(root: str | os.PathLike[str]) -> str | None:
    """The report URL ``root/.epochfs/status.json`` names (``report_url``), or None: no status file
    (a plain folder, the mount not there), an older sidecar's without the field, or a value that is
    not an http(s) URL (then the caller's fallback is tried, not a broken URL)."""
    return _url_of(read_status(root))


def sidecar_of_status(root: str | os.PathLike[str]) -> tuple[str | None, str | None]:
    """(:func:`report_url_from_status`, :func:`cache_of_status`) from one reading of status.json."""
    return _url_of(doc := read_status(root)), _cache_of(doc)


def _url_of(doc: dict[str, object] | None) -> str | None:
    url = doc.get(REPORT_URL_KEY) if doc is not None else None
    if not isinstance(url, str) or urlparse(url).scheme not in ("http", "https"):
        return None
    return url


CACHE_HEADER = "X-Epochfs-Cache"
"""The request header naming the cache a report or cut request is about (``<host>:<cache>``,
percent-encoded); the sidecar answers 409 when it serves another cache."""


def cache_of_status(root: str | os.PathLike[str] | None) -> str | None:
    """The cache behind ``root`` as its status.json names it (``shard.node``), percent-encoded for
    :data:`CACHE_HEADER`; None where it names none (a plain folder, an older sidecar's document)."""
    return _cache_of(read_status(root) if root is not None else None)


def _cache_of(doc: dict[str, object] | None) -> str | None:
    shard = doc.get(SHARD_KEY) if doc is not None else None
    node = shard.get("node") if isinstance(shard, dict) else None
    if not isinstance(node, str) or not node:
        return None
    try:
        return quote(node, safe="/:@+-._~", errors="surrogateescape")  # a non-UTF-8 path as its bytes
    except UnicodeEncodeError:  # not a name any path has: no header, as for a mount naming none
        return None


def other_cache_reason(status: int, doc: object) -> str | None:
    """The sidecar's reason when its answer (``status``, the parsed JSON ``doc``) is the 409 for
    another cache's request, else None."""
    if status != 409 or not isinstance(doc, dict) or doc.get("state") != "other_cache":
        return None
    return str(doc.get("message", "the sidecar serves another cache"))


def other_cache(error: BaseException) -> str | None:
    """:func:`other_cache_reason` of a failed request's ``error`` (reads its body)."""
    if not isinstance(error, urllib.error.HTTPError) or error.code != 409:
        return None
    try:
        doc = json.loads(error.read())
    except (OSError, ValueError):
        return None
    return other_cache_reason(error.code, doc)


def report_url(root: str | os.PathLike[str] | None) -> str | None:
    """Where a reader of ``root`` reports, first found: ``EPOCHFS_REPORT_URL`` when set (None when
    it says off), the URL ``root``'s status.json names, :data:`DEFAULT_URL`."""
    if root is None or ENV in os.environ:
        return report_url_from_env()
    return report_url_from_status(root) or DEFAULT_URL
