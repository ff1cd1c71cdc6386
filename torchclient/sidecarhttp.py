"""Requests to the pod's own sidecar (reports, cut requests), never through a proxy.

Why: ``urllib.request.urlopen`` sends every request through the environment's ``HTTP_PROXY`` /
``http_proxy`` unless ``NO_PROXY`` names the host, and clusters behind a corporate proxy set it
pod-wide (for pip, model hubs, object stores). The sidecar listens on the pod's loopback, which no
proxy can reach (and its cut endpoint answers only loopback clients), so a proxied request
failed, and on the folder view epoch 0 was never cut. The sidecar's URL always names this pod, so
its requests go direct whatever the proxy settings; the remote store's proxies are the sidecar's
business, not the client's.
"""

from __future__ import annotations

import urllib.request
from http.client import HTTPResponse

_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""An opener with no proxy at all (an empty ProxyHandler replaces the default one that reads the
environment); thread-safe as urlopen's own: the reporter's thread and the loader share it."""


def open_sidecar(request: urllib.request.Request, timeout: float) -> HTTPResponse:
    """``urlopen(request)``, direct to the sidecar: the environment's proxies are not applied.
    Raises as urlopen does (HTTPError for an answer other than 2xx, URLError, OSError)."""
    response: HTTPResponse = _DIRECT.open(request, timeout=timeout)
    return response
