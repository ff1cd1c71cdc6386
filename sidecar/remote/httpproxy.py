"""Forward proxies: a proxy URL read as botocore reads it, the environment's proxy for a URL by
botocore's rule (:func:`environ_proxy`: the route of the aiohttp sessions of ``gs://`` and
``http(s)://``, which botocore does not carry), and the errors a proxy's refusal or absence
becomes for the presigned GETs (:mod:`.httpget`).

Credentials in the proxy URL become ``Proxy-Authorization: Basic``, sent to the proxy only (in the
``CONNECT`` or the absolute-form request, never inside a tunnel), and never appear in a message: a
proxy is always shown as ``http://***:***@host:port``. A module of its own so that the connection
code (:mod:`.httpconn`) and the pool share one definition of a proxy.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from epochfs.sidecar.remote.sigv4 import environ_proxies


def with_scheme(url: str) -> str:
    """A proxy URL as botocore reads it: ``host:port`` (or ``//host:port``) alone means
    ``http://host:port``. Raises :class:`ValueError` for a scheme other than ``http`` and
    ``https`` (``socks5://``), which botocore would glue ``http://`` in front of and fail later."""
    if url.startswith(("http:", "https:")):
        return url
    if "://" in url:
        raise ValueError(f"unsupported proxy URL scheme {url.split('://', 1)[0]!r} "
                         "(http:// and https:// proxies are supported)")
    return ("http:" if url.startswith("//") else "http://") + url


def environ_proxy(url: str) -> str | None:
    """The proxy URL (credentials and all) that requests to ``url`` go through, decided as
    botocore decides an S3 endpoint's (:func:`.sigv4.environ_proxies`, the rule of
    ``botocore.utils.get_environ_proxies``, which the ``s3://`` remote's listing and downloads
    follow): ``HTTP_PROXY`` or ``HTTPS_PROXY`` (lower case first) by ``url``'s scheme, none where
    ``NO_PROXY`` covers its host, ``ALL_PROXY`` never. None: straight to ``url``. The backends that
    are not botocore's (aiohttp reads no variable unless told to, and then by rules of its own)
    take their route from here, so every scheme leaves a proxied cluster the same way. Raises
    :class:`ValueError` for a proxy URL that cannot be used (:meth:`Proxy.from_url`)."""
    proxy = environ_proxies(url).get(urlsplit(url).scheme)
    if not proxy:
        return None
    Proxy.from_url(proxy)  # its scheme, host and port checked as the S3 fast path checks them
    return with_scheme(proxy)


@dataclass(frozen=True)
class Proxy:
    """A forward proxy, read from its URL the way botocore reads one
    (``botocore.httpsession.ProxyConfiguration``): ``host:port`` alone means ``http://host:port``;
    ``user:password@`` (percent-encoded) becomes ``Proxy-Authorization: Basic``. ``str()`` masks
    the credentials; ``repr()`` leaves them out."""

    scheme: str
    host: str
    port: int
    authorization: str | None = field(default=None, repr=False)

    @classmethod
    def from_url(cls, url: str) -> Proxy:
        parts = urlsplit(with_scheme(url))
        try:
            port = parts.port
        except ValueError:
            raise ValueError("the proxy URL has an invalid port") from None
        if not parts.hostname:
            raise ValueError("the proxy URL has no host")
        authorization = None
        if parts.username is not None and parts.password is not None:
            user, password = unquote(parts.username), unquote(parts.password)
            if user and password:
                token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
                authorization = f"Basic {token}"
        default = 443 if parts.scheme == "https" else 80
        return cls(parts.scheme, parts.hostname, port or default, authorization)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        auth = "***:***@" if self.authorization else ""
        return f"{self.scheme}://{auth}{host}:{self.port}"


class ProxyError(Exception):
    """The proxy refused a request or a tunnel (407: its credentials are missing or wrong);
    ``status`` is the proxy's HTTP status."""

    def __init__(self, proxy: Proxy, status: int, reason: str) -> None:
        hint = " (check the credentials in the proxy URL)" if status == 407 else ""
        super().__init__(f"the proxy {proxy} answered {status} {reason}{hint}".strip())
        self.proxy = str(proxy)
        self.status = status
        self.reason = reason


class ProxyConnectError(ConnectionError):
    """The proxy could not be reached (refused, reset, timed out): retried like any connection
    error, and said to be the proxy's."""


_TUNNEL_FAILED = re.compile(r"Tunnel connection failed: (\d{3})\s*(.*)")
"""How http.client (3.11 to 3.13) reports a CONNECT answered with a status other than 200; an
``OSError`` of another wording passes through unchanged."""


def tunnel_refusal(proxy: Proxy, error: OSError) -> ProxyError | None:
    """The :class:`ProxyError` that http.client's failed ``CONNECT`` stands for, or None when
    ``error`` is not one."""
    failed = _TUNNEL_FAILED.match(str(error))
    return None if failed is None else ProxyError(proxy, int(failed[1]), failed[2])


__all__ = ["Proxy", "ProxyConnectError", "ProxyError", "environ_proxy", "tunnel_refusal", "with_scheme"]
