"""Which backend serves which URL scheme: the one table the rest is derived from.

:data:`BACKENDS` names, for each backend, its schemes, the module of this package that holds it,
the function there that opens it, how the help text shows it and the extra that installs its
libraries. From it come :data:`SCHEMES` (what ``--remote`` accepts, checked when the settings are
read), :data:`HELP` (the ``--remote`` help of the settings and the CLI), the message naming the
extra to install when a backend's library is missing, and :func:`open_remote`. A backend's module
is imported only when a URL of its scheme is opened, so reading this table costs no client
library. A backend's line also says what its URLs name after ``scheme://`` (:data:`Names`: a
bucket, a container, a host or a folder) and may hold a rule of its own (:attr:`Backend.check`):
:func:`check_url` refuses by them, before anything is opened, a URL no backend could serve (the
settings' ``--remote`` and ``--index``, the admission webhook's remote), and the webhook checks the
name or the port by :attr:`Backend.names`, so neither lists schemes. What else a new backend needs
(its library's error rule, the chart's pattern, the image's extra) is in docs/architecture.md.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from epochfs.sidecar.redact import redact
from epochfs.sidecar.remote.base import Remote, RemoteError
from epochfs.sidecar.remote.urls import split_url

Names = Literal["bucket", "container", "host", "folder"]
"""What a remote URL's part after ``scheme://`` names: a ``bucket`` (``s3://bucket/prefix``), a
``container`` (``az://container[@account-host]/prefix``: the name is what precedes ``@``), a
``host`` (``https://host[:port]/path``) or, with the path, a ``folder`` (``file:///path``)."""

SHAPES: dict[str, str] = {"bucket": "{}://bucket/prefix", "container": "{}://container/prefix",
                          "host": "{}://host/path", "folder": "{}:///path/to/folder"}
"""How a URL of each :data:`Names` is written (``.format(scheme)``), for the message of a URL
that lacks the part."""


def named_part(url: str, names: Names) -> str:
    """The part of ``url`` that a backend of :attr:`Backend.names` ``names`` reads it for: the
    bucket, the container (before any ``@account-host``), the host name (as urllib reads it, so a
    broken one such as ``[::1`` raises :class:`ValueError`) or, for a folder, its host and path;
    "" where the URL lacks it."""
    _, host, path = split_url(url)
    if names == "container":
        return host.partition("@")[0]
    if names == "host":
        return urlsplit(url).hostname or ""
    if names == "folder":
        return host + path
    return host


S3_BUCKET = re.compile(r"[A-Za-z0-9._-]{1,255}")
"""The characters an S3 bucket name may hold. Names of buckets made today are 3-63 lower-case
letters, digits, dots and hyphens; buckets made in us-east-1 before March 2018 may hold upper-case
letters and underscores, up to 255 characters, and S3-compatible stores have rules of their own,
so only what no bucket can be is refused (a space, ``:``, ``@``...): such a name is a mistake in
the URL, most often a store's ``host:port`` written where the bucket goes."""


def s3_url_problem(url: str) -> str | None:
    """S3's own rule (:attr:`Backend.check`): no credentials in the URL, and a bucket name S3
    can hold (:data:`S3_BUCKET`)."""
    host = split_url(url).host
    if "@" in host:
        return ("an s3:// URL holds no credentials (the AWS_* variables, a profile or the pod's role "
                "give them)")
    if not S3_BUCKET.fullmatch(host):
        hint = "; the store's host:port is the endpoint URL, given apart" if ":" in host else ""
        return (f"{host!r} is not an S3 bucket name (letters, digits, '.', '-' and '_' only, at "
                f"most 255){hint}")
    return None


def file_url_problem(url: str) -> str | None:
    """The ``file://`` rule (:attr:`Backend.check`): an absolute folder, ``file:///path`` (or
    ``file://localhost/path``, the same folder). ``file://remote/sub`` was read as the folder
    ``remote/sub`` of the working folder and recorded as typed, so the same text from another
    working folder named another dataset, and the cache's identity check, which compares the text,
    let that dataset's files into the cache beside the first one's."""
    host = split_url(url).host
    if host and host.lower() != "localhost":
        return (f"a file:// URL needs an absolute path, file:///abs/path: {host!r} would be a folder "
                "relative to the working folder (file://localhost/abs/path is the same as "
                "file:///abs/path)")
    return None


@dataclass(frozen=True)
class Backend:
    schemes: tuple[str, ...]
    """URL schemes it serves; the first is the one the help text shows."""
    module: str
    """Its module in this package."""
    opener: str
    """The function of that module that opens a URL: ``(url, *, endpoint_url, index_url,
    concurrency, read_timeout) -> Remote`` (options it has no use for are ignored)."""
    shown: str
    """How the help text shows it."""
    extra: str
    """The extra of the ``epochfs`` distribution that installs its libraries."""
    libraries: tuple[str, ...] = ()
    """The top-level modules it needs beyond the sidecar's own (:func:`missing_library`)."""
    names: Names = "bucket"
    """What its URLs name after ``scheme://`` (:data:`Names`): :func:`check_url` refuses a URL
    without it, and the admission webhook checks that name (a bucket's or container's characters)
    or a host's port by it."""
    check: Callable[[str], str | None] | None = None
    """Its own rule for a URL that has the part it names: what is wrong with it (the words after
    the URL in :func:`check_url`'s message), or None. S3's is :func:`s3_url_problem`, file's
    :func:`file_url_problem`."""
    stores_objects: bool = False
    """An object store (a bucket or container of keys): a single object of it addressed by its
    whole URL (an index file, ``epochfs index --out``) is read and written through this backend's
    remote (:mod:`.objects`), with ``--endpoint-url``, its timeouts and its one-try clients."""


BACKENDS: tuple[Backend, ...] = (
    Backend(("s3",), "s3", "open_s3", "s3://", "sidecar", stores_objects=True, check=s3_url_problem),
    Backend(("gs", "gcs"), "fsspec", "open_gcs", "gs://", "gcs", ("gcsfs",), stores_objects=True),
    Backend(("az", "abfs", "abfss"), "azure", "open_azure", "az://", "azure", ("adlfs",),
            stores_objects=True, names="container"),
    Backend(("https", "http"), "httpindex", "open_http", "https:// (index file)", "sidecar", names="host"),
    Backend(("file",), "file", "open_file", "file://", "sidecar", names="folder", check=file_url_problem),
)

SCHEMES: tuple[str, ...] = tuple(scheme for backend in BACKENDS for scheme in backend.schemes)
"""Every URL scheme a remote may have."""
HELP = ", ".join(backend.shown for backend in BACKENDS)
"""The schemes as the help of ``--remote`` lists them."""


def backend_for(scheme: str) -> Backend | None:
    """The backend serving ``scheme`` (any case), or None."""
    scheme = scheme.lower()
    return next((backend for backend in BACKENDS if scheme in backend.schemes), None)


def missing_library(scheme: str) -> str | None:
    """What is missing here to serve ``scheme`` (``"adlfs (pip install 'epochfs[azure]')"``), or
    None when its backend's libraries are installed. Found without importing them: the admission
    webhook, which runs in the sidecar's image, refuses a remote that image cannot serve (the
    sidecar would fail its startup probe for half an hour instead)."""
    backend = backend_for(scheme)
    if backend is None:
        return None
    for name in backend.libraries:
        if importlib.util.find_spec(name) is None:
            return f"{name} (pip install 'epochfs[{backend.extra}]')"
    return None


def open_remote(
    url: str,
    *,
    endpoint_url: str | None = None,
    index_url: str | None = None,
    concurrency: int = 32,
    read_timeout: float = 30.0,
) -> Remote:
    """The :class:`~.base.Remote` for ``url``; raises :class:`~.base.RemoteError` with a message
    for the user (an unknown scheme, a library to install, a URL its backend refuses).
    ``endpoint_url``: another endpoint of the store's API (S3-compatible stores, a GCS emulator)."""
    scheme = split_url(url).scheme
    backend = backend_for(scheme)
    if backend is None:
        raise RemoteError(f"unknown URL scheme {scheme!r} (known: {', '.join(SCHEMES)})")
    try:
        module = importlib.import_module(f"{__package__}.{backend.module}")
        opener: Callable[..., Remote] = getattr(module, backend.opener)
        return opener(url, endpoint_url=endpoint_url, index_url=index_url, concurrency=concurrency,
                      read_timeout=read_timeout)
    except ImportError as e:
        if not e.name or e.name.split(".")[0] == "epochfs":
            raise
        raise RemoteError(f"{scheme}:// needs {e.name.split('.')[0]}, which is not installed: "
                          f"pip install 'epochfs[{backend.extra}]'") from None


def check_url(url: str) -> None:
    """Raise :class:`ValueError` saying what is wrong with the remote URL ``url`` (none: it may be
    opened): no scheme, a scheme no backend serves (naming those known), a URL without the part
    its backend's :attr:`Backend.names` says it names (no bucket, container, host or folder), or
    what the backend's own :attr:`Backend.check` refuses (S3: what cannot be a bucket name;
    file: a relative folder).
    Nothing is opened and no backend's library imported, so a mistake ends a start at once, with
    exit status 2 from the settings, instead of a sampler that fails later or lists something
    else."""
    scheme = split_url(url).scheme
    shown = repr(redact(url))
    known = ", ".join(SCHEMES)
    if not scheme:
        raise ValueError(f"needs a scheme ({', '.join(s + '://' for s in SCHEMES)}): {shown}")
    backend = backend_for(scheme)
    if backend is None:
        raise ValueError(f"unknown URL scheme {scheme!r} in {shown} (known: {known})")
    if not named_part(url, backend.names):
        raise ValueError(f"{shown}: no {backend.names} ({SHAPES[backend.names].format(scheme)})")
    problem = backend.check(url) if backend.check is not None else None
    if problem is not None:
        raise ValueError(f"{shown}: {problem}")


def check_index_url(url: str) -> None:
    """Raise :class:`ValueError` for an index URL (``--index``) that cannot be read: a local path
    (no scheme) is read as a file and a URL of a backend's scheme is checked as a remote's
    (:func:`check_url`); any other scheme must be one fsspec knows, which reads it."""
    scheme = split_url(url).scheme
    if not scheme or backend_for(scheme) is not None:
        if scheme:
            check_url(url)
        return
    # Imported for such a URL only: fsspec is slow to import, and an S3 sampler has no use for it.
    from fsspec.registry import known_implementations, registry

    if scheme not in known_implementations and scheme not in registry:
        raise ValueError(f"unknown URL scheme {scheme!r} in {redact(url)!r} (known: {', '.join(SCHEMES)}, "
                         "or another fsspec protocol)")


__all__ = ["BACKENDS", "HELP", "S3_BUCKET", "SCHEMES", "SHAPES", "Backend", "Names", "backend_for",
           "check_index_url", "check_url", "file_url_problem", "missing_library", "named_part",
           "open_remote", "s3_url_problem"]
