"""An ``--index`` on ``http(s)://`` (epochfs's own format, read by the one opener of index files)
goes through ``HTTP(S)_PROXY`` as every remote's requests do (docs/sampler.md, "Proxies"): it
went straight to the origin, around the proxy, while the objects of an ``http(s)://`` remote
took the proxy. A real forward proxy that requires credentials, a real HTTP origin."""

from __future__ import annotations

import functools
import http.server
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import serving_http
from proxy_helpers import ForwardProxy

from epochfs.sidecar.remote.objects import open_stream

PROXY_VARS = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy",
              "ALL_PROXY", "all_proxy")


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "index.jsonl").write_bytes(b'{"epochfs_index": 1}\n{"key": "a.bin", "size": 3}\n')
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    with serving_http(handler) as url:
        yield url


def test_an_index_on_http_is_read_through_the_proxy(origin: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    proxy = ForwardProxy(auth=("pod", "p@ss:word"))
    try:
        monkeypatch.setenv("HTTP_PROXY", proxy.proxy_url("pod", "p@ss:word"))
        with open_stream(f"{origin}/index.jsonl", what="the index") as f:
            assert f.read().startswith(b'{"epochfs_index": 1}')
        assert any(target.endswith("/index.jsonl") for _, target in proxy.relayed), proxy.relayed
        relayed = len(proxy.relayed)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        with open_stream(f"{origin}/index.jsonl", what="the index") as f:
            f.read()
        assert len(proxy.relayed) == relayed, "NO_PROXY's host went through the proxy"
    finally:
        proxy.close()
