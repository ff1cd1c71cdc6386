"""Which backend serves which URL scheme: the one table the rest is derived from.

:data:`BACKENDS` names, for each backend, its schemes, the module of this package that holds it,
the function there that opens it, how the help text shows it and the extra that installs its
libraries. From it come :data:`SCHEMES` (what ``--remote`` accepts, checked when the settings are
read), :data:`HELP` (the ``--remote`` help of the settings and the CLI), the message naming the
extra to install when a backend's library is missing, and :func:`open_remote`. A backend's module
is imported only when a URL of its scheme is opened, so reading this table costs no client
library. Adding a backend is one module with an opener and one line here (docs/architecture.md).
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlparse

from epochfs.sidecar.remote.base import Remote, RemoteError


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


BACKENDS: tuple[Backend, ...] = (
    Backend(("s3",), "s3", "open_s3", "s3://", "sidecar"),
    Backend(("gs", "gcs"), "fsspec", "open_gcs", "gs://", "gcs", ("gcsfs",)),
    Backend(("az", "abfs", "abfss"), "azure", "open_azure", "az://", "azure", ("adlfs",)),
    Backend(("https", "http"), "httpindex", "open_http", "https:// (index file)", "sidecar"),
    Backend(("file",), "file", "open_file", "file://", "sidecar"),
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
    scheme = urlparse(url).scheme.lower()
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


__all__ = ["BACKENDS", "HELP", "SCHEMES", "Backend", "backend_for", "missing_library", "open_remote"]
