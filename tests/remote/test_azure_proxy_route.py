"""``az://`` takes its route from the environment as botocore would take it for the account's
endpoint, as every other scheme does, not by aiohttp's own rules (the Azure SDK made its aiohttp
session with ``trust_env=True``): a proxy URL without a scheme (``user:password@host:port``) is
``http://`` (aiohttp failed every request, the credentials in the message), a ``NO_PROXY`` entry
``host:port`` sends the store's requests straight (aiohttp matched the host alone), and no
credential of the proxy ever appears in a failure.

Azurite behind a reverse front that records the client port of every request, and a real forward
proxy that requires credentials (tests/proxy_helpers.py), as tests/remote/test_conformance_proxy.py
runs every backend.
"""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from proxy_helpers import ForwardProxy, ReverseFront
from test_conformance import OBJECTS, PREFIX, Backend, azure_env, azurite  # noqa: F401  (fixtures)
from test_conformance_proxy import (  # noqa: F401  (the autouse fixture that clears the variables)
    METADATA,
    PASSWORD,
    USER,
    direct,
    no_proxy_env,
    proxy,
    relayed,
    use,
)

from epochfs.sidecar.remote import RemoteError


@pytest.fixture
def fronted_az(request: pytest.FixtureRequest) -> Iterator[tuple[Backend, ReverseFront]]:
    """A container filled with :data:`OBJECTS` in Azurite, its endpoint a reverse front."""
    server = request.getfixturevalue("azure_env")
    container = server.container({f"{PREFIX}/{k}": v for k, v in OBJECTS.items()})
    where = urlsplit(server.endpoint)
    origin = f"{where.scheme}://{where.netloc}"
    front = ReverseFront(upstream=origin)
    try:
        yield Backend("az", f"az://{container}/{PREFIX}", server.endpoint.replace(origin, front.url)), front
    finally:
        front.close()


def test_a_proxy_url_without_a_scheme_is_http_and_carries_its_credentials(
        fronted_az: tuple[Backend, ReverseFront], proxy: ForwardProxy,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``HTTP_PROXY=user:password@host:port`` (botocore reads it as ``http://``): the listing and
    the reads go through the proxy, its credentials accepted, nothing straight to the store."""
    backend, front = fronted_az
    monkeypatch.setenv("HTTP_PROXY", proxy.proxy_url(USER, PASSWORD).removeprefix("http://"))
    monkeypatch.setenv("NO_PROXY", METADATA)

    use(backend, lambda: None)

    assert any(f"{PREFIX}/train/000.bin" in target for target in relayed(proxy))
    assert proxy.refused == 0
    assert front.requests and direct(front, proxy) == []


def test_a_no_proxy_entry_with_a_port_sends_the_requests_straight(
        fronted_az: tuple[Backend, ReverseFront], proxy: ForwardProxy,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``NO_PROXY=127.0.0.1:<the store's port>``: botocore's rule covers the endpoint, so every
    request goes straight and the proxy is asked nothing (aiohttp matched the host alone and sent
    them to the proxy)."""
    backend, front = fronted_az
    monkeypatch.setenv("HTTP_PROXY", proxy.proxy_url(USER, PASSWORD))
    monkeypatch.setenv("NO_PROXY", f"{METADATA},127.0.0.1:{front.port}")

    use(backend)

    assert relayed(proxy) == []
    assert front.requests and len(direct(front, proxy)) == len(front.requests)


def test_a_refused_proxy_fails_the_listing_without_its_credentials(
        fronted_az: tuple[Backend, ReverseFront], proxy: ForwardProxy,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Wrong credentials in a proxy URL without a scheme: the listing fails through the proxy
    (407), and neither the password nor the user's credentials appear in any message of the
    failure's chain."""
    backend, front = fronted_az
    wrong = "s3cr:et@pw"
    monkeypatch.setenv("HTTP_PROXY", proxy.proxy_url(USER, wrong).removeprefix("http://"))
    monkeypatch.setenv("NO_PROXY", METADATA)

    remote = backend.open()
    try:
        with pytest.raises(RemoteError) as failure:
            list(remote.list())
    finally:
        remote.close()

    said = []
    e: BaseException | None = failure.value
    while e is not None:
        said.append(f"{e} {e!r}")
        e = e.__cause__ or e.__context__
    for text in said:
        assert "s3cr" not in text and "et%40pw" not in text and "et@pw" not in text, text
    assert proxy.refused >= 1
    assert direct(front, proxy) == []
