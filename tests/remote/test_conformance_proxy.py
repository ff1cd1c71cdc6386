"""Every network backend goes through the forward proxy of the environment, as botocore goes
through it for ``s3://``: ``HTTP_PROXY``/``HTTPS_PROXY`` by the endpoint's scheme (lower or upper
case), and straight to the store where ``NO_PROXY`` covers its host.

A cluster that lets traffic out only through a proxy sets these variables on the sidecar; a
backend that ignored them went straight out (``gs://`` and ``http(s)://`` did: their aiohttp
sessions read no proxy), silently where direct egress is open, and in a cluster that logs or
filters at the proxy it escaped both. Each backend runs against its own real server, started as
tests/remote/test_conformance.py starts it (moto, fake-gcs-server, Azurite, a plain HTTP server
with an index file), behind a reverse front that records the client port of every request it
passes on; a real forward proxy (tests/proxy_helpers.py) records the ports it reaches the front
from. A request that reached the front from another port went direct.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from urllib.parse import unquote, urlsplit

import pytest
from proxy_helpers import ForwardProxy, ReverseFront
from test_conformance import (  # noqa: F401  (fixtures the backends' builders ask for by name)
    BACKENDS,
    OBJECTS,
    PREFIX,
    Backend,
    azure_env,
    azurite,
    gcs_server,
    http_server,
)

from epochfs.sidecar.remote import RemoteError, open_remote

PROXY_VARS = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
              "no_proxy", "NO_PROXY", "REQUEST_METHOD")
"""What decides a route (urllib ignores ``HTTP_PROXY`` where ``REQUEST_METHOD`` is set, a CGI)."""
METADATA = "169.254.169.254,metadata.google.internal"
"""Where google-auth looks for a GCE metadata server, which a cluster's ``NO_PROXY`` lists."""
NETWORK = ("s3", "http", "gs", "az")
"""The backends that reach a store over HTTP (``file://`` and the in-memory ones do not)."""
READ = "train/000.bin"
"""Read whole (``open``)."""
RANGED = "top.bin"
"""Read by a range (``read_range``)."""
USER, PASSWORD = "pod", "p@ss:word"
"""The proxy's credentials (``user:password@`` in its URL, percent-encoded)."""


@pytest.fixture(autouse=True)
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy variable of the machine leaks in; each test sets its own once the store is filled
    (the fillers, urllib's and the SDKs', honour them too)."""
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def proxy() -> Iterator[ForwardProxy]:
    """A forward proxy that requires credentials (they travel in the proxy's URL)."""
    server = ForwardProxy(auth=(USER, PASSWORD))
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(params=NETWORK)
def fronted(request: pytest.FixtureRequest) -> Iterator[tuple[Backend, ReverseFront]]:
    """The backend (its store filled with :data:`OBJECTS`), its URLs naming a reverse front that
    passes every request on to the store's server, and the front."""
    backend = BACKENDS[request.param](request)
    where = urlsplit(backend.endpoint_url or backend.url)
    origin = f"{where.scheme}://{where.netloc}"
    front = ReverseFront(upstream=origin)
    try:
        yield Backend(backend.name, backend.url.replace(origin, front.url),
                      (backend.endpoint_url or "").replace(origin, front.url) or None), front
    finally:
        front.close()


def use(backend: Backend, listed: Callable[[], None] = lambda: None) -> None:
    """List the backend, then read :data:`READ` whole and :data:`RANGED` by a range, checking
    each answer; ``listed()`` checks what the test wants checked between the listing and the
    reads."""
    remote = backend.open()
    try:
        assert {str(o.key): o.size for o in remote.list()} == {k: len(v) for k, v in OBJECTS.items()}
        listed()
        reader = remote.open(READ)
        try:
            assert b"".join(iter(lambda: reader.read(1 << 16), b"")) == OBJECTS[READ]
        finally:
            reader.close()
        assert remote.read_range(RANGED, 10, 100) == OBJECTS[RANGED][10:110]
    finally:
        remote.close()


def direct(front: ReverseFront, proxy: ForwardProxy) -> list[str]:
    """The requests the front got from a client other than the proxy: sent straight to the store."""
    with front.lock, proxy.lock:
        return [f"{method} {path}" for port, method, path in front.requests
                if port not in proxy.upstream_ports]


def relayed(proxy: ForwardProxy) -> list[str]:
    """What the proxy relayed, unquoted (GCS quotes the ``/`` of a key in its object's URL)."""
    with proxy.lock:
        return [unquote(target) for _method, target in proxy.relayed]


def test_the_listing_and_the_reads_go_through_the_proxy(
        fronted: tuple[Backend, ReverseFront], proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch) -> None:
    """``HTTP_PROXY`` and ``HTTPS_PROXY`` (upper case), with credentials: every request of the
    listing and of the reads reaches the store through the proxy, none straight."""
    backend, front = fronted
    url = proxy.proxy_url(USER, PASSWORD)
    monkeypatch.setenv("HTTP_PROXY", url)
    monkeypatch.setenv("HTTPS_PROXY", url)
    monkeypatch.setenv("NO_PROXY", METADATA)

    def through_the_proxy() -> None:
        assert relayed(proxy), f"{backend.name}: the listing did not go through the proxy"

    use(backend, through_the_proxy)

    seen = relayed(proxy)
    for key in (READ, RANGED):
        assert any(f"{PREFIX}/{key}" in target for target in seen), (backend.name, key, seen)
    assert proxy.refused == 0
    assert front.requests
    assert direct(front, proxy) == [], f"{backend.name} went to the store without the proxy"


def test_no_proxy_sends_the_store_s_requests_straight(
        fronted: tuple[Backend, ReverseFront], proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch) -> None:
    """``no_proxy`` naming the store's host (lower case, as the proxies): botocore's rule, every
    backend straight to the store, the proxy asked nothing."""
    backend, front = fronted
    url = proxy.proxy_url(USER, PASSWORD)
    monkeypatch.setenv("http_proxy", url)
    monkeypatch.setenv("https_proxy", url)
    monkeypatch.setenv("no_proxy", f"{METADATA},127.0.0.1")

    use(backend)
    assert relayed(proxy) == []
    assert front.requests and len(direct(front, proxy)) == len(front.requests)


@pytest.mark.parametrize("fronted", ["http"], indirect=True)
def test_an_index_on_a_host_no_proxy_covers_is_read_straight(
        fronted: tuple[Backend, ReverseFront], proxy: ForwardProxy, monkeypatch: pytest.MonkeyPatch) -> None:
    """An index file (``--index``) on another host than the objects takes its own host's route:
    ``NO_PROXY`` covers it (``localhost``) and not the objects' (``127.0.0.1``), so the index is
    read straight and the objects' HEADs and reads go through the proxy. The proxy is written
    ``user:password@host:port``, without a scheme, which botocore reads as ``http://``."""
    backend, front = fronted
    url = proxy.proxy_url(USER, PASSWORD).removeprefix("http://")
    monkeypatch.setenv("HTTP_PROXY", url)
    monkeypatch.setenv("NO_PROXY", f"{METADATA},localhost")
    index = f"http://localhost:{front.port}/{PREFIX}/index.txt"

    remote = open_remote(backend.url, index_url=index, read_timeout=10)
    try:
        assert {str(o.key): o.size for o in remote.list()} == {k: len(v) for k, v in OBJECTS.items()}
        assert remote.read_range(RANGED, 10, 100) == OBJECTS[RANGED][10:110]
    finally:
        remote.close()

    assert {request.split()[1] for request in direct(front, proxy)} == {f"/{PREFIX}/index.txt"}
    seen = relayed(proxy)
    assert any(f"{PREFIX}/{RANGED}" in target for target in seen), seen
    assert not any("index.txt" in target for target in seen), seen


def test_a_proxy_url_that_cannot_be_used_fails_the_open(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``socks5://`` proxy (botocore fails on it too) fails the remote's opening, naming the
    variable, rather than requests that go straight out; nothing is sent, so no server is needed."""
    monkeypatch.setenv("HTTP_PROXY", "socks5://127.0.0.1:1080")
    with pytest.raises(RemoteError, match=r"HTTP_PROXY.*unsupported proxy URL scheme 'socks5'"):
        open_remote("http://127.0.0.1:9/data")
