"""The parsers of the settings that name a place (the remote, an index, an S3 endpoint, a folder):
each raises ValueError saying what is wrong, as every parser of
:mod:`epochfs.sidecar.confparse` does (:mod:`epochfs.sidecar.config` turns it into a
:class:`~epochfs.sidecar.config.ConfigError` naming the flag). Kept apart from the parsers of
numbers so that each module stays within the size bound.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from epochfs.sidecar.remote.registry import check_index_url, check_url


def _remote(text: str) -> str:
    """A remote URL (``--remote``, ``epochfs index REMOTE``): stripped, and refused with the
    reason where it cannot be one (:func:`~epochfs.sidecar.remote.registry.check_url`): exit
    status 2 at start, before anything is opened or mounted."""
    url = text.strip()
    if not url:
        raise ValueError("must not be empty")
    check_url(url)
    return url


def _index_url(text: str) -> str | None:
    """An index URL or path (``--index``): stripped, empty meaning none (an empty
    ``EPOCHFS_INDEX`` has always meant no index), refused with the reason where it cannot be read
    (:func:`~epochfs.sidecar.remote.registry.check_index_url`)."""
    url = text.strip()
    if url:
        check_index_url(url)
    return url or None


def _path(text: str) -> Path:
    """A path flag (``--cache``, ``--mount``, ...): never empty, which ``Path("")`` reads as the
    working folder, where a cache or a view would then be made without a word. Stripped of
    surrounding whitespace, as every other setting is: a variable filled from a file or a secret
    often ends in a newline, and ``/cache\n`` made a new, empty cache beside the real one. A
    leading ``~`` is the home folder, as a shell would read it on a command line and as
    ``epochfs index --out`` reads it: ``EPOCHFS_CACHE='~/x'`` (quoted, so no shell expanded it)
    made a folder named ``~`` in the working folder."""
    if not str(text).strip():
        raise ValueError("must not be empty (give a folder; an empty value would mean the working folder)")
    try:
        return Path(str(text).strip()).expanduser()
    except RuntimeError as e:  # no HOME and no passwd entry, or ~user of no such user
        raise ValueError(f"cannot expand '~' in {str(text).strip()!r}: {e}") from None


ENDPOINT_EXAMPLE = "http://minio:9000"


def _endpoint_url(text: str) -> str | None:
    """An S3-compatible endpoint (``--endpoint-url``): an http(s) URL with a host, port optional;
    empty meaning none (the store's own endpoint), as an empty ``EPOCHFS_INDEX`` means no index.
    botocore refuses anything else only when the sampler opens the remote, as a traceback (and the
    sidecar restarted its sampler on it for ever). Credentials in it (``http://USER:PASS@host``)
    are refused, as in an ``s3://`` remote: no backend reads them from the endpoint (S3 signs with
    the ``AWS_*`` credentials, Azure with its key or SAS token, GCS with its token), so they were
    taken and ignored. The value is never echoed, so a password typed there is not shown."""
    url = str(text).strip()
    if not url:
        return None
    if any(c.isspace() or not c.isprintable() for c in url):
        raise ValueError(f"must be an http(s) URL such as {ENDPOINT_EXAMPLE} (this one has spaces or "
                         "control characters)")
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        got = f"scheme {parts.scheme!r}" if parts.scheme else "no scheme"
        raise ValueError(f"must be an http(s) URL such as {ENDPOINT_EXAMPLE}, got {got}")
    if "@" in parts.netloc:
        raise ValueError("holds credentials (user:password@), which no store reads from the endpoint: "
                         "give them as the store's variables (AWS_ACCESS_KEY_ID and "
                         "AWS_SECRET_ACCESS_KEY for S3)")
    if not parts.hostname:
        raise ValueError(f"has no host (an http(s) URL such as {ENDPOINT_EXAMPLE})")
    try:
        parts.port  # noqa: B018 - urlsplit checks the port only when it is read
    except ValueError:
        raise ValueError("has a bad port (a number 0-65535 after the host's ':')") from None
    return url


def _optional_path(text: str) -> Path | None:
    """A path whose default is none (``--link-root``): empty or blank means that default, as it
    does for every setting whose default is none (README, ``EPOCHFS_MAX_RATE=``), so that a
    manifest's ``value: ""`` is "unset" and not a refusal at every start (a crash loop). Never
    the working folder, which ``Path("")`` would be; else as :func:`_path`."""
    return _path(text) if str(text).strip() else None
