"""The one way a remote URL is split into its scheme, its bucket (or host) and its path: the
dataset's ``--remote``, an ``--index``, an S3 Inventory's manifest and data files, any object
opened by URL as a stream (:mod:`.objects`).

An object key, a blob name and a folder's name may hold ``#`` and ``?``, and the URL names them
as they are (``s3://bkt/run#1/`` is the prefix ``run#1/``). urllib's ``urlsplit`` would take
``#...`` for a fragment and ``?...`` for a query and drop both from the path: ``s3://bkt/run#1``
would list ``run/``, an index at ``s3://bkt/idx#2.txt`` would be read from ``idx``. So URLs of
every scheme but http(s) are split by hand: the scheme up to the first ``://``, the bucket up to
the next ``/``, and the rest, character for character, is the path.

``http(s)`` URLs are split by urllib, as an HTTP client reads them: there ``?`` starts a query
that belongs to the resource a GET asks for (a signed URL's signature, a server's parameters),
kept at the path's end here, and ``#`` a fragment that no client sends, dropped. A key holding
those characters is written percent-encoded in an http(s) URL (``%23``, ``%3F``), as the HTTP
remote quotes the keys it asks for.
"""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import urlsplit

HTTP_SCHEMES = ("http", "https")
"""The schemes whose URLs are split as HTTP reads them (a query, a fragment)."""


class SplitURL(NamedTuple):
    """A remote URL's parts (a tuple: ``scheme, host, path = split_url(url)``)."""

    scheme: str
    """Lower case; "" for a text without ``://`` (a local path)."""
    host: str
    """The bucket (``s3``, ``gs``), ``container[@account-host]`` (``az``), ``host[:port]``
    (``http(s)``, userinfo included) or a ``file://`` URL's host ("" or ``localhost``)."""
    path: str
    """What follows, from its leading ``/`` ("" when nothing does); for http(s) with the query."""


def split_url(url: str) -> SplitURL:
    """``url`` split into scheme, bucket or host, and path, the path keeping ``#`` and ``?`` for
    every scheme but http(s) (see the module's doc); a text without ``://`` is a path alone."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return SplitURL("", "", url)
    scheme = scheme.lower()
    if scheme in HTTP_SCHEMES:
        parts = urlsplit(url)
        return SplitURL(scheme, parts.netloc, parts.path + (f"?{parts.query}" if parts.query else ""))
    host, slash, path = rest.partition("/")
    return SplitURL(scheme, host, slash + path)


def same_remote(url: str) -> str:
    """``url`` in the form two spellings of one dataset share, for telling whether a cache belongs
    to it: for every scheme but http(s), the path's leading and trailing ``/`` dropped
    (``s3://b/p/``, ``s3://b//p`` and ``s3://b/p`` list the same keys: a prefix is a folder), and
    for ``file://`` every empty component (``file:///d//ds/`` is the folder ``/d/ds``; an object
    store keeps ``a//b`` as a prefix of its own) and the host ``localhost``, which names this
    machine as the empty host does (``file://localhost/d`` is ``file:///d``, RFC 8089). http(s)
    URLs are kept as they are (a server may tell ``/a/`` from ``/a``)."""
    scheme, host, path = split_url(url)
    if not scheme or scheme in HTTP_SCHEMES:
        return url
    if scheme == "file":
        path = "/".join(part for part in path.split("/") if part)
        host = "" if host.lower() == "localhost" else host
    path = path.strip("/")
    return f"{scheme}://{host}" + (f"/{path}" if path else "")


DEFAULT_PORTS = {"http": 80, "https": 443}


def same_endpoint(url: str) -> str:
    """An endpoint URL (``--endpoint-url``, ``STORAGE_EMULATOR_HOST``...) in the form two spellings
    of one store share, and with nothing secret in it, for recording which store filled a cache:
    scheme and host in lower case, the scheme's default port and userinfo dropped, the path kept
    without its trailing ``/`` (an Azure endpoint's path names the account), query and fragment
    dropped (a SAS token's place). "" stays "" (the store's own endpoint)."""
    if not url:
        return ""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    host = f"[{host}]" if ":" in host else host
    try:
        port = parts.port
    except ValueError:  # not a number: kept as written, still a distinct store
        port = None
        host = parts.netloc.rpartition("@")[2].lower()
    if port is not None and port != DEFAULT_PORTS.get(scheme):
        host = f"{host}:{port}"
    return f"{scheme}://{host}{parts.path.rstrip('/')}"


def local_root(url: str) -> str:
    """The folder a ``file://`` URL names (``""`` for the root): a folder's legal ``#`` and ``?``
    kept (``file:///data/run#1``); ``file://localhost/path`` is ``/path``. Any other host raises
    :class:`ValueError`: ``file://remote/sub`` would be the relative folder ``remote/sub``, a
    different dataset from each working folder (the settings refuse it at start,
    :func:`~.registry.file_url_problem`; this is the same rule for a URL that reaches a remote
    some other way)."""
    _, host, path = split_url(url)
    if host and host.lower() != "localhost":
        raise ValueError(f"{url}: a file:// URL needs an absolute path, file:///abs/path, not the "
                         f"relative {host + path!r}")
    return path


__all__ = ["HTTP_SCHEMES", "SplitURL", "local_root", "same_endpoint", "same_remote", "split_url"]
