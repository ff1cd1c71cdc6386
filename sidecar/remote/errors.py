"""Translation of each client library's exceptions into the typed failures of the remote
(:mod:`.base`: not found, changed, denied, transient, throttled, unavailable), where they arise, so
the downloader and the listing decide from the kind alone and never look inside another library's
exceptions. This module is the translation; the rules it runs are :mod:`.librules`'s:

- a *rule* names the kind of one exception: :func:`stdlib_kind` here (sockets, ``http.client``,
  ``ssl``, files), which every translation asks first, and one per client library in
  :mod:`.librules` (:func:`~.librules.botocore_kind` for S3 through botocore,
  :func:`~.librules.aiohttp_kind` with :func:`~.librules.gcs_kind` for fsspec's ``http(s)://``
  and ``gs://``, :func:`~.librules.azure_kind` for the Azure SDK under adlfs);
- :func:`translate` runs one rule over an exception and its causes in a single walk, and
  :class:`Translated` re-raises what it finds where a backend reads (``with Translated(rule):``);
  :func:`fast_path_failure` types S3's presigned GETs (:mod:`.httpget`): S3's error answer, read
  with :mod:`xml.etree`, else :func:`translate`;
- :func:`may_answer_later` asks :func:`~.librules.library_kind` (every installed library's rule at
  once) for a failure whose library is not known, and :func:`failure_reason` says a failure's
  cause in a few words.

Every name of :mod:`.librules` is importable from here too, so callers import the typed failures,
the rules and the translation from one module.

An exception no rule knows (a bug, an unusual ``OSError`` such as EIO) is left as it is; the
downloader skips the object without retrying. The rules keep two behaviours on purpose
(tests/remote/test_remote_errors.py holds the table): an ``http(s)://`` remote's 5xx is retried
but not counted toward an outage; and botocore's ``SSLError`` (even a certificate that fails) is
retried. fsspec raises FileNotFoundError over whatever failed its look at a URL: an HTTP answer
under it (a 401, 403 or 429) or a connection that could not be made (refused, reset, timed out:
an outage) is typed by that cause, so that a remote that is down keeps its keys instead of having
every one skipped as gone. Throttling is
its own kind, :class:`Throttled`, never an outage nor a reason to skip; so is a refusal of the
credentials themselves, :class:`CredentialsRefused`, an outage (the keys kept) and never a reason
to skip. Every backend's reads
and listing meet a store that throttles, refuses or is down as the same kind
(tests/remote/test_conformance.py, against each backend's own server).
"""

from __future__ import annotations

import http
import http.client
import os
import socket
import ssl
import sys
from collections.abc import Callable, Iterator

from epochfs.sidecar.remote.base import (
    Changed,
    CredentialsRefused,
    Denied,
    Kind,
    NotFound,
    RemoteError,
    RemoteFailure,
    Throttled,
    Transient,
    Unavailable,
)
from epochfs.sidecar.remote.httpget import HTTPStatusError, ProxyError
from epochfs.sidecar.remote.librules import (
    AZURE_CREDENTIAL_CODES,
    AZURE_RETRY_CODES,
    AZURE_THROTTLE_CODES,
    GCS_ANONYMOUS,
    GCS_THROTTLE_REASONS,
    S3_CREDENTIAL_CODES,
    S3_RETRY_CODES,
    S3_THROTTLE_CODES,
    aiohttp_kind,
    azure_answer_kind,
    azure_kind,
    botocore_error_code,
    botocore_kind,
    gcs_kind,
    library_kind,
    refused_google_token,
    s3_answer,
    s3_error_code,
    s3_kind,
    status_kind,
    unparsed_answer,
)
from epochfs.sidecar.remote.notstore import NotTheStore

Rule = Callable[[BaseException], "Kind | None"]
"""A library's translation: the kind one exception stands for, or None when it does not know it."""


def _asyncio_timeout() -> type[BaseException]:
    """``asyncio.TimeoutError`` (its own class before Python 3.11) where asyncio is loaded: an
    exception of it cannot exist otherwise, and importing asyncio costs the sampler ~25 ms of
    start-up for nothing."""
    asyncio = sys.modules.get("asyncio")
    return asyncio.TimeoutError if asyncio is not None else TimeoutError


def stdlib_kind(e: BaseException) -> Kind | None:
    """The kind of a standard-library error (sockets, ``http.client``, ``ssl``, files), or of a
    failure already typed further down a chain."""
    if isinstance(e, RemoteFailure):
        return type(e)
    if isinstance(e, FileNotFoundError):
        return NotFound
    if isinstance(e, (PermissionError, ssl.SSLCertVerificationError)):
        return Denied  # a certificate that fails is a configuration problem, not a passing one
    if isinstance(e, (ConnectionError, TimeoutError, _asyncio_timeout())):
        return Unavailable  # refused, reset, aborted (also socket.timeout, fsspec's FSTimeoutError)
    if isinstance(e, (http.client.HTTPException, ssl.SSLError)):
        # A truncated or garbled response (IncompleteRead, BadStatusLine...); a TLS connection
        # cut mid-body (SSLEOFError). RemoteDisconnected is a ConnectionResetError: above.
        return Transient
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling, outermost first."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def failure_reason(exc: BaseException) -> str:
    """The cause of ``exc`` in a few words for a message: ``HTTP 404 Not Found``, ``connection
    refused``, ``host name does not resolve (...)``, ``timed out``, a TLS failure; else the text of
    the first exception of the chain that says more than a URL. fsspec reports an http(s) URL it
    cannot read as ``FileNotFoundError(url)``, whose text is only the URL again: the status of a
    link further down the chain says what happened."""
    links = list(_chain(exc))
    for link in links:
        if (loop := redirect_loop(link)) is not None:
            return loop
    for link in links:
        status = getattr(link, "status", None)  # aiohttp's ClientResponseError, HTTPStatusError...
        if isinstance(status, int) and 100 <= status <= 599:
            phrase = getattr(link, "message", None) or getattr(link, "reason", None)
            if not isinstance(phrase, str) or not phrase:
                try:
                    phrase = http.HTTPStatus(status).phrase
                except ValueError:
                    phrase = ""
            return f"HTTP {status} {phrase}".rstrip()
    for link in links:
        if isinstance(link, socket.gaierror):
            return f"host name does not resolve ({link.strerror or link})"
    for link in links:
        if isinstance(link, ssl.SSLCertVerificationError):
            # aiohttp's ClientConnectorCertificateError is one too, without ssl's attributes.
            return f"TLS certificate refused ({getattr(link, 'verify_message', None) or link})"
        if isinstance(link, ssl.SSLError):
            return f"TLS failed ({getattr(link, 'reason', None) or link})"
    for link in links:
        if isinstance(link, (TimeoutError, _asyncio_timeout())):
            return "timed out"
    for link in links:
        if isinstance(link, OSError) and isinstance(link.errno, int) and link.errno > 0:
            text = os.strerror(link.errno)
            return text[:1].lower() + text[1:]
    for link in links:
        text = str(link).strip()
        if text and not (" " not in text and "://" in text):  # more than a bare URL
            return text
    return type(exc).__name__


def _link_kind(e: BaseException, rule: Rule | None) -> Kind | None:
    """The standard library's verdict first; the library's own rule for what it does not know,
    or to tell that an error of both kinds (aiohttp's TLS handshake error) is an outage."""
    found = stdlib_kind(e)
    own = rule(e) if rule is not None else None
    if found is None:
        return own
    if found is Transient and own is not None and issubclass(own, Unavailable):
        return Unavailable
    return found


def redirect_loop(e: BaseException) -> str | None:
    """What aiohttp's redirect loop (``TooManyRedirects``) says in words, or None when ``e`` is not
    one: its own text (``0, message='', url=...``) says neither what happened nor how often."""
    aiohttp = sys.modules.get("aiohttp")
    if aiohttp is None or not isinstance(e, aiohttp.TooManyRedirects):
        return None
    url = getattr(e.request_info, "real_url", "")
    return f"{len(e.history)} redirects from {url} without an answer (a redirect loop)"


def _quoted(e: BaseException) -> str:
    """What a failure's message quotes of ``e``."""
    return redirect_loop(e) or str(e)


def _under_not_found(causes: list[BaseException], rule: Rule | None) -> BaseException | None:
    """What decides a FileNotFoundError raised over ``causes``, or None (it is one). fsspec's HTTP
    filesystem raises FileNotFoundError from whatever failed its look at a URL (a HEAD, then a
    GET): under it an HTTP answer that is not a 404 (a 401, a 403 or a 429) says what the store
    answered, a connection that could not be made (refused, reset, timed out) that the store is
    down, and an answer that could not be followed (a redirect loop) a failure worth another try;
    a not-found would hide each, and skip every key of a remote that is down as gone."""
    for cause in causes:
        status = getattr(cause, "status", None)
        if isinstance(status, int) and 400 <= status <= 599 and status != 404:
            return cause
    for cause in causes:
        kind = _link_kind(cause, rule)
        if kind is not None and issubclass(kind, Transient):
            return cause
    return None


def translate(exc: BaseException, rule: Rule | None = None, *, what: str = "") -> RemoteFailure | None:
    """The typed failure ``exc`` stands for, or None when no rule knows it (leave it as it is).

    One walk down the chain of causes: the outermost exception that a rule knows gives the kind,
    but a FileNotFoundError raised over an HTTP answer or a failed connection, which that cause
    gives, and quotes (:func:`_under_not_found`).
    When that kind is :class:`Transient`, the causes below it may still show an outage: a
    botocore or aiohttp wrapper around a connection reset or a timeout is :class:`Unavailable`,
    one around a truncated body is not. ``what`` (the key) starts the message when given.
    """
    if isinstance(exc, RemoteFailure):
        return exc
    kind: Kind | None = None
    said = exc  # what the message quotes
    links = list(_chain(exc))
    for i, link in enumerate(links):
        found = _link_kind(link, rule)
        if found is None:
            continue
        if kind is None:
            kind = found
            answer = _under_not_found(links[i + 1:], rule) if isinstance(link, FileNotFoundError) else None
            answered = _link_kind(answer, rule) if answer is not None else None
            if answer is not None and answered is not None:
                kind, said = answered, answer
            if kind is not Transient:
                break
        elif issubclass(found, Unavailable):
            kind = Unavailable
            break
        elif not issubclass(found, Transient):
            break  # a cause that is not about the connection: no outage
    if kind is None:
        return None
    prefix = f"{what}: " if what else ""
    failure = kind(f"{prefix}{type(said).__name__}: {_quoted(said)}".rstrip(": "))
    failure.__cause__ = exc
    return failure


class Translated:
    """A context manager that re-raises a library's exception as its typed failure, where it
    arises (``with Translated(botocore_kind): body.read(n)``); an exception no rule knows, and
    one already typed, pass through unchanged. Reusable and thread-safe: it holds only the rule."""

    __slots__ = ("rule",)

    def __init__(self, rule: Rule | None = None) -> None:
        self.rule = rule

    def __enter__(self) -> None:
        return None

    def __exit__(self, _type: object, exc: BaseException | None, _tb: object) -> None:
        if not isinstance(exc, Exception) or isinstance(exc, RemoteFailure):
            return
        failure = translate(exc, self.rule)
        if failure is not None:
            raise failure from exc


def fast_path_failure(exc: BaseException, *, key: str) -> RemoteFailure | None:
    """The typed failure of a presigned GET (:mod:`.httpget`), or None: S3's
    error answer (status and ``<Code>``), a proxy's refusal by its status, else the socket's,
    TLS's or ``http.client``'s error. The message names the key, never the presigned URL."""
    if isinstance(exc, ProxyError):  # 407, or a tunnel the proxy refused: not S3's answer
        return status_kind(exc.status)(f"{key}: {exc}", status=exc.status)
    if isinstance(exc, HTTPStatusError):
        code, why = s3_answer(exc)
        return s3_kind(exc.status, code)(f"{key}: {why}", status=exc.status)
    return translate(exc)


PLAIN_HTTP_TLS_REASONS = frozenset({
    "WRONG_VERSION_NUMBER", "HTTP_REQUEST", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG",
})
"""OpenSSL's reasons for a TLS handshake whose answer is not TLS at all: a plain-HTTP server
answering an ``https://`` URL (which versions of OpenSSL give which of them varies)."""


def tls_answered_by_plain_http(exc: BaseException) -> bool:
    """Whether a TLS handshake in ``exc``'s chain was answered by plain HTTP: ``ssl``'s error
    with one of :data:`PLAIN_HTTP_TLS_REASONS`, found by its ``reason`` or, where a library
    wrapped it without a cause (urllib3 under botocore), by OpenSSL's ``[SSL: REASON]`` in the
    text. At the start this is a wrong scheme, never a passing failure; while running it stays
    :class:`Transient` (:func:`stdlib_kind`)."""
    for link in _chain(exc):
        # aiohttp's SSL errors are ssl.SSLError too, without ssl's attributes.
        if isinstance(link, ssl.SSLError) and getattr(link, "reason", None) in PLAIN_HTTP_TLS_REASONS:
            return True
        if any(f"[SSL: {reason}]" in str(link) for reason in PLAIN_HTTP_TLS_REASONS):
            return True
    return False


def may_answer_later(exc: BaseException) -> bool:
    """Whether a remote that failed as ``exc`` at the start may answer later: it could not be
    reached (connection refused or reset, a timeout, a 5xx: a store still starting) or it asked
    for fewer requests, or the resolver could not answer now (``EAI_AGAIN``: the node's DNS
    server down or slow, as in a pod whose cluster DNS is still starting); not when it answered
    with a refusal (no such bucket, access denied), nor when its host name does not exist (a typo
    in ``--endpoint-url``: ``EAI_NONAME``), nor when a 2xx answer was not the store's (a web page:
    :class:`~.notstore.NotTheStore`), nor when a TLS handshake was answered by plain HTTP
    (an ``https://`` URL for an ``http://`` store: :func:`tls_answered_by_plain_http`), nor when
    it redirects without end (:func:`redirect_loop`: retried while running, at the start a URL to
    fix), nor when it refused the credentials (:class:`~.base.CredentialsRefused`: retried while
    running, where they may be renewed under a running remote, but at the start a setting to fix),
    nor for an error no rule knows. ``epochfs sample``
    exits :data:`~epochfs.sidecar.config.EXIT_RETRY` (75) for the first (the sidecar starts it
    again) and 2 for the rest (the sidecar stops with the reason: docs/sidecar.md)."""
    links = list(_chain(exc))
    names = [link for link in links if isinstance(link, socket.gaierror)]
    if names:
        return all(link.errno == socket.EAI_AGAIN for link in names)
    if any(isinstance(link, NotTheStore) for link in links):
        return False  # answered, by something else than the store: every try meets it again
    if tls_answered_by_plain_http(exc):
        return False  # an https:// URL for a plain-HTTP server: every try meets it again
    if any(redirect_loop(link) is not None for link in links):
        return False  # a URL that redirects to itself: while running retried, at the start a URL to fix
    if any(isinstance(link, (ConnectionError, TimeoutError, _asyncio_timeout())) for link in links):
        return True  # under any wrapper: fsspec reports an http(s) URL it cannot reach as not found
    failure = translate(exc, library_kind)
    return failure is not None and failure.retry and not failure.credentials


__all__ = [
    "AZURE_CREDENTIAL_CODES",
    "AZURE_RETRY_CODES",
    "AZURE_THROTTLE_CODES",
    "GCS_ANONYMOUS",
    "GCS_THROTTLE_REASONS",
    "PLAIN_HTTP_TLS_REASONS",
    "S3_CREDENTIAL_CODES",
    "S3_RETRY_CODES",
    "S3_THROTTLE_CODES",
    "Changed",
    "CredentialsRefused",
    "Denied",
    "Kind",
    "NotFound",
    "RemoteError",
    "RemoteFailure",
    "Rule",
    "Throttled",
    "Transient",
    "Translated",
    "Unavailable",
    "aiohttp_kind",
    "azure_answer_kind",
    "azure_kind",
    "botocore_error_code",
    "botocore_kind",
    "failure_reason",
    "fast_path_failure",
    "gcs_kind",
    "library_kind",
    "may_answer_later",
    "redirect_loop",
    "refused_google_token",
    "s3_answer",
    "s3_error_code",
    "s3_kind",
    "status_kind",
    "stdlib_kind",
    "tls_answered_by_plain_http",
    "translate",
    "unparsed_answer",
]
