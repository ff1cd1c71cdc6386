"""The S3 fast path through forward proxies, as botocore goes through them (issue 9 D).

Real parts only: a forward proxy on 127.0.0.1 (tests/proxy_helpers.py), moto's S3 server, TLS
with a CA bundle made by openssl, and the real ``epochfs sample`` for the end-to-end runs.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, urlsplit

import pytest
from common import S3Server, free_port, put_objects, random_objects, wait_until
from proxy_helpers import BODY, ForwardProxy, ReverseFront, StaticServer, TLSFiles, make_tls
from sampler_helpers import running_sampler, s3_env, verify_cache

from epochfs.sidecar.download import is_transient, is_unavailable
from epochfs.sidecar.remote import RemoteFailure
from epochfs.sidecar.remote.httpget import GetPool, Proxy, ProxyConnectError, ProxyError
from epochfs.sidecar.remote.s3 import S3Remote
from epochfs.sidecar.store import Store

PROXY_VARS = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
              "no_proxy", "NO_PROXY", "REQUEST_METHOD")


@pytest.fixture(autouse=True)
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy variable of the machine leaks in (the sampler children inherit this env)."""
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TLSFiles:
    return make_tls(tmp_path_factory.mktemp("tls"))


@contextlib.contextmanager
def serving(*servers: ForwardProxy | ReverseFront | StaticServer) -> Iterator[None]:
    try:
        yield
    finally:
        for server in servers:
            server.close()


def read_all(pool: GetPool, url: str) -> bytes:
    resp = pool.get(url)
    try:
        out = bytearray()
        buf = memoryview(bytearray(1 << 16))
        while n := resp.readinto(buf):
            out += buf[:n]
        return bytes(out)
    finally:
        resp.close()


def read_object(remote: S3Remote, key: str) -> bytes:
    reader = remote.open(key)
    try:
        out = bytearray()
        while chunk := reader.read(1 << 20):
            out += chunk
        return bytes(out)
    finally:
        reader.close()


def s3_remote(s3: S3Server, endpoint: str | None = None) -> S3Remote:
    return S3Remote(url="s3://bkt/ds", endpoint_url=endpoint or s3.endpoint, concurrency=2,
                    connect_timeout=5, read_timeout=10)


def fetched(sp, n: int):
    return lambda: sp.stats()["samples"] >= n and sp.stats()["inflight_bytes"] == 0


# ------------------------------------------------------------------------------ the sampler


def test_sampler_downloads_go_through_an_http_proxy_with_credentials(s3: S3Server, tmp_path: Path
                                                                    ) -> None:
    """HTTP_PROXY with user:password: the presigned GETs (not botocore's) reach moto through the
    proxy, with Proxy-Authorization; every byte verified; no credential in the log."""
    user, password = "proxy-user-7", "s3cr3t:p@ss/w0rd"
    objects = random_objects(12, 64_000)
    put_objects(s3, "bkt", {f"ds/{k}": v for k, v in objects.items()})
    proxy = ForwardProxy(auth=(user, password))
    cache = tmp_path / "cache"
    env = s3_env(s3.endpoint) | {"HTTP_PROXY": proxy.proxy_url(user, password)}
    with serving(proxy), running_sampler(cache, "s3://bkt/ds", "--endpoint-url", s3.endpoint,
                                         "--capacity", "1Gi", "--concurrency", "4", env=env) as sp:
        wait_until(fetched(sp, len(objects)), what="every object fetched")
    assert verify_cache(cache, objects) == len(objects)
    assert Store(cache).stats().skipped_total == 0
    got = {urlsplit(url).path.removeprefix("/bkt/ds/") for url in proxy.presigned_gets()
           if "list-type=2" not in url}
    assert got == set(objects), "every object was one presigned GET relayed by the proxy"
    assert any("list-type=2" in target for target in proxy.presigned_gets()), "the listing too (presigned)"
    assert proxy.refused == 0
    log = sp.log_text()
    assert f"S3 requests go through the proxy http://***:***@127.0.0.1:{proxy.port}" in log
    assert "using botocore for every GET" not in log, "the fast path, not the botocore fallback"
    for secret in (password, quote(password, safe=""), user, "X-Amz-Signature"):
        assert secret not in log


def test_sampler_tunnels_through_connect_to_a_tls_endpoint(s3: S3Server, tls: TLSFiles,
                                                           tmp_path: Path) -> None:
    """HTTPS_PROXY and an https:// endpoint (moto behind TLS, trusted through AWS_CA_BUNDLE):
    every presigned GET reaches the endpoint from one of the proxy's CONNECT tunnels."""
    objects = random_objects(10, 80_000)
    put_objects(s3, "bkt", {f"ds/{k}": v for k, v in objects.items()})
    front = ReverseFront(upstream=s3.endpoint, tls=tls.server_context())
    proxy = ForwardProxy()
    cache = tmp_path / "cache"
    env = s3_env(s3.endpoint) | {"HTTPS_PROXY": proxy.proxy_url(), "AWS_CA_BUNDLE": str(tls.cert)}
    with serving(front, proxy), running_sampler(cache, "s3://bkt/ds", "--endpoint-url", front.url,
                                                "--capacity", "1Gi", "--concurrency", "4",
                                                env=env) as sp:
        wait_until(fetched(sp, len(objects)), what="every object fetched")
    assert verify_cache(cache, objects) == len(objects)
    gets = front.presigned_gets()
    assert {urlsplit(path).path.removeprefix("/bkt/ds/") for _port, path in gets
            if "list-type=2" not in path} == set(objects)
    assert {port for port, _path in gets} <= proxy.upstream_ports, "no presigned GET came direct"
    assert proxy.relayed and set(proxy.relayed) == {("CONNECT", f"127.0.0.1:{front.port}")}
    assert proxy.tunnel_bytes[0] >= sum(map(len, objects.values()))
    assert "using botocore for every GET" not in sp.log_text()


# ------------------------------------------------------------------- S3Remote: NO_PROXY, auth


@pytest.mark.parametrize(
    ("proxy_var", "no_proxy_var", "no_proxy"),
    [
        ("HTTP_PROXY", "NO_PROXY", "127.0.0.1"),
        ("HTTP_PROXY", "NO_PROXY", "127.0.0.1:{port}"),
        ("http_proxy", "no_proxy", "localhost, 127.0.0.1"),
        ("HTTP_PROXY", "NO_PROXY", "*"),
    ],
)
def test_no_proxy_covering_the_endpoint_goes_direct(s3: S3Server, monkeypatch: pytest.MonkeyPatch,
                                                    proxy_var: str, no_proxy_var: str,
                                                    no_proxy: str) -> None:
    data = random_objects(1, 100_000)["train/00000.bin"]
    put_objects(s3, "bkt", {"ds/a.bin": data})
    proxy = ForwardProxy()
    with serving(proxy):
        monkeypatch.setenv(proxy_var, proxy.proxy_url())
        monkeypatch.setenv(no_proxy_var, "example.com")  # does not cover the endpoint: proxied
        with contextlib.closing(s3_remote(s3)) as remote:
            assert read_object(remote, "a.bin") == data
        assert len(proxy.presigned_gets()) == 1
        relayed = len(proxy.relayed)
        monkeypatch.setenv(no_proxy_var, no_proxy.format(port=urlsplit(s3.endpoint).port))
        with contextlib.closing(s3_remote(s3)) as remote:
            assert read_object(remote, "a.bin") == data
            assert read_object(remote, "a.bin") == data
        assert len(proxy.relayed) == relayed, "neither botocore nor the fast path used the proxy"


def test_proxy_credentials_go_to_the_proxy_and_are_never_shown(s3: S3Server,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               caplog: pytest.LogCaptureFixture
                                                               ) -> None:
    user, password = "proxy user", "p@ss:w/rd%"
    data = random_objects(1, 50_000)["train/00000.bin"]
    put_objects(s3, "bkt", {"ds/a.bin": data})
    caplog.set_level(logging.DEBUG)
    proxy = ForwardProxy(auth=(user, password))
    with serving(proxy):
        monkeypatch.setenv("HTTP_PROXY", proxy.proxy_url(user, password))  # percent-encoded
        with contextlib.closing(s3_remote(s3)) as remote:
            assert read_object(remote, "a.bin") == data
        assert len(proxy.presigned_gets()) == 1 and proxy.refused == 0

        wrong = "wrong-" + password
        monkeypatch.setenv("HTTP_PROXY", proxy.proxy_url(user, wrong))
        with contextlib.closing(s3_remote(s3)) as remote, pytest.raises(RemoteFailure) as info:
            remote.open("a.bin")
    err = info.value
    assert err.status == 407
    assert str(err).startswith(f"a.bin: the proxy http://***:***@127.0.0.1:{proxy.port} answered 407")
    assert "credentials" in str(err)
    assert not is_transient(err), "a configuration error: the sample is not retried"
    assert proxy.refused >= 1
    shown = "\n".join([str(err), repr(err), caplog.text])
    token = base64.b64encode(f"{user}:{wrong}".encode()).decode()
    for secret in (wrong, quote(wrong, safe=""), user, quote(user, safe=""), token, "X-Amz-Signature"):
        assert secret not in shown


CASES = [
    ({"HTTP_PROXY": "{proxy}"}, True),
    ({"http_proxy": "{proxy}", "HTTP_PROXY": "http://127.0.0.1:9"}, True),  # lower case wins
    ({"ALL_PROXY": "{proxy}"}, False),  # botocore takes only the target's scheme
    ({"HTTPS_PROXY": "{proxy}"}, False),  # an http:// endpoint
    ({"HTTP_PROXY": "{proxy}", "NO_PROXY": "example.com,127.0.0.1:{port}"}, False),
    ({"HTTP_PROXY": "{proxy}", "REQUEST_METHOD": "GET"}, False),  # CGI: urllib skips HTTP_PROXY
]


@pytest.mark.parametrize(("env", "proxied"), CASES)
def test_the_fast_path_takes_the_route_of_botocores_own_client(
        s3: S3Server, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], proxied: bool) -> None:
    proxy = ForwardProxy()
    with serving(proxy):
        for name, value in env.items():
            monkeypatch.setenv(name, value.format(proxy=proxy.proxy_url(),
                                                  port=urlsplit(s3.endpoint).port))
        with contextlib.closing(s3_remote(s3)) as remote:
            ours = remote._gets.proxy_for(s3.endpoint)
            # botocore's own decision for its client (a private attribute, read only here).
            theirs = remote._client._endpoint.http_session._proxy_config.proxy_url_for(s3.endpoint)
    assert (ours is not None) is proxied
    assert (theirs is not None) is proxied
    if theirs is not None:
        assert ours == Proxy.from_url(theirs)


# ------------------------------------------------------------------------ GetPool: the routes


def test_connect_tunnel_to_a_tls_target(tls: TLSFiles) -> None:
    """An https:// target through an http:// proxy: CONNECT (with the credentials, which never
    go inside the tunnel), then TLS to the target checked against the CA bundle; kept alive."""
    target = StaticServer(tls=tls.server_context())
    proxy = ForwardProxy(auth=("u", "pw"))
    with serving(target, proxy):
        pool = GetPool(connect_timeout=5, read_timeout=5, cafile=str(tls.cert),
                       proxies={"https": proxy.proxy_url("u", "pw")})
        try:
            assert read_all(pool, f"{target.url}/bkt/a?X-Amz-Signature=s") == BODY
            assert read_all(pool, f"{target.url}/bkt/b") == BODY
        finally:
            pool.close()
        assert proxy.relayed == [("CONNECT", f"127.0.0.1:{target.port}")], "one tunnel, reused"
        assert len(target.requests) == 2 and target.client_ports() <= proxy.upstream_ports
        for _port, _path, headers in target.requests:
            assert "proxy-authorization" not in {h.lower() for h in headers}

        untrusted = GetPool(connect_timeout=5, read_timeout=5,
                            proxies={"https": proxy.proxy_url("u", "pw")})
        try:
            with pytest.raises(ssl.SSLCertVerificationError):
                untrusted.get(f"{target.url}/bkt/c")
        finally:
            untrusted.close()
        assert len(proxy.relayed) == 2, "the certificate check happened through the tunnel"

        refused = GetPool(connect_timeout=5, read_timeout=5, cafile=str(tls.cert),
                          proxies={"https": proxy.proxy_url("u", "not-the-password")})
        try:
            with pytest.raises(ProxyError) as info:
                refused.get(f"{target.url}/bkt/d?X-Amz-Signature=s")
        finally:
            refused.close()
    assert info.value.status == 407
    assert f"the proxy http://***:***@127.0.0.1:{proxy.port} answered 407" in str(info.value)
    assert "not-the-password" not in str(info.value) + repr(info.value)
    assert "X-Amz-Signature" not in str(info.value)


def test_an_https_proxy_for_http_and_https_targets(tls: TLSFiles) -> None:
    """An https:// proxy (botocore supports them): TLS to the proxy, then the absolute-form
    request (http:// target) or CONNECT and TLS inside TLS (https:// target)."""
    proxy = ForwardProxy(tls=tls.server_context(), auth=("u", "pw"))
    plain, secure = StaticServer(), StaticServer(tls=tls.server_context())
    with serving(proxy, plain, secure):
        url = proxy.proxy_url("u", "pw")
        assert url.startswith("https://")
        pool = GetPool(connect_timeout=5, read_timeout=5, cafile=str(tls.cert),
                       proxies={"http": url, "https": url})
        try:
            for i in range(2):
                assert read_all(pool, f"{plain.url}/p{i}") == BODY
                assert read_all(pool, f"{secure.url}/s{i}") == BODY
        finally:
            pool.close()
        assert proxy.relayed == [("GET", f"{plain.url}/p0"),
                                 ("CONNECT", f"127.0.0.1:{secure.port}"),
                                 ("GET", f"{plain.url}/p1")]
        assert plain.client_ports() <= proxy.upstream_ports
        assert secure.client_ports() <= proxy.upstream_ports and len(secure.client_ports()) == 1

        untrusted = GetPool(connect_timeout=5, read_timeout=5, proxies={"http": url})
        try:
            with pytest.raises(ssl.SSLCertVerificationError):  # the proxy's own certificate
                untrusted.get(f"{plain.url}/x")
        finally:
            untrusted.close()


def test_close_wakes_a_read_blocked_inside_a_tls_in_tls_tunnel(tls: TLSFiles) -> None:
    """GetPool.close() shuts the socket under both TLS layers down, so a stop never waits for
    the read timeout of a stalled body, through a proxy too."""
    proxy = ForwardProxy(tls=tls.server_context())
    target = StaticServer(tls=tls.server_context())
    with serving(proxy, target):
        pool = GetPool(connect_timeout=5, read_timeout=30, cafile=str(tls.cert),
                       proxies={"https": proxy.proxy_url()})
        resp = pool.get(f"{target.url}/stall/x")
        result: list[object] = []

        def reader() -> None:
            buf = memoryview(bytearray(len(BODY)))
            try:
                result.append(resp.readinto(buf))
            except Exception as e:  # an early end or an error: either, but not a 30 s wait
                result.append(e)

        thread = threading.Thread(target=reader, daemon=True)
        thread.start()
        assert target.stalled.wait(10)
        started = time.monotonic()
        pool.close()
        thread.join(timeout=5)
        assert not thread.is_alive(), "close() ended the blocked read"
        assert time.monotonic() - started < 5
        assert result and result[0] != len(BODY)


def test_proxied_and_direct_connections_are_pooled_apart(tls: TLSFiles) -> None:
    """Only https:// goes through the proxy here: the http:// target keeps its direct
    connection and the https:// one its tunnel, each reused, never one for the other."""
    proxy = ForwardProxy()
    plain, secure = StaticServer(), StaticServer(tls=tls.server_context())
    with serving(proxy, plain, secure):
        pool = GetPool(connect_timeout=5, read_timeout=5, cafile=str(tls.cert),
                       proxies={"https": proxy.proxy_url()})
        try:
            for i in range(3):
                assert read_all(pool, f"{plain.url}/p{i}") == BODY
                assert read_all(pool, f"{secure.url}/s{i}") == BODY
        finally:
            pool.close()
    assert len(plain.client_ports()) == 1 and plain.client_ports().isdisjoint(proxy.upstream_ports)
    assert len(secure.client_ports()) == 1 and secure.client_ports() <= proxy.upstream_ports
    assert proxy.relayed == [("CONNECT", f"127.0.0.1:{secure.port}")]


def test_an_unreachable_proxy_is_named_and_counts_as_an_outage() -> None:
    port = free_port()  # nothing listens there
    pool = GetPool(connect_timeout=5, read_timeout=5,
                   proxies={"http": f"http://u:hunter2@127.0.0.1:{port}"})
    try:
        with pytest.raises(ProxyConnectError) as info:
            pool.get("http://127.0.0.1:1/bkt/k?X-Amz-Signature=s")
    finally:
        pool.close()
    assert is_transient(info.value) and is_unavailable(info.value)
    assert f"cannot connect to the proxy http://***:***@127.0.0.1:{port}" in str(info.value)
    assert "hunter2" not in str(info.value) and "X-Amz-Signature" not in str(info.value)


@pytest.mark.parametrize("url", [
    "127.0.0.1:3128",
    "//proxy.example:8080",
    "http://proxy.example",
    "https://proxy.example",
    "http://us%20er:p%40ss%3Aw%2Frd@proxy.example:3128",
    "http://user@proxy.example:3128",  # a user without a password: no Proxy-Authorization
    "https://u:p@[::1]:8443",
])
def test_proxy_urls_are_read_as_botocore_reads_them(url: str) -> None:
    from botocore.httpsession import ProxyConfiguration
    from urllib3.util import parse_url

    config = ProxyConfiguration(proxies={"http": url})
    fixed = config.proxy_url_for("http://target.example/")
    expected = parse_url(fixed)
    proxy = Proxy.from_url(url)
    default = 443 if expected.scheme == "https" else 80
    assert (proxy.scheme, proxy.host, proxy.port) == (
        expected.scheme, (expected.host or "").strip("[]"), expected.port or default)
    assert proxy.authorization == config.proxy_headers_for(fixed).get("Proxy-Authorization")
    if proxy.authorization:
        assert "***:***@" in str(proxy)
        assert proxy.authorization not in repr(proxy)
    for part in ("p%40ss", "p@ss", ":p@"):
        assert part not in str(proxy) + repr(proxy)


def test_an_unusable_proxy_url_is_refused_without_its_credentials() -> None:
    with pytest.raises(ValueError) as info:
        Proxy.from_url("socks5://u:hunter2@127.0.0.1:1080")
    assert "socks5" in str(info.value) and "hunter2" not in str(info.value)
