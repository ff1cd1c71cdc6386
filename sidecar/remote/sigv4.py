"""S3 presigned URLs (AWS Signature Version 4, query form) with the standard library only.

Why not botocore's ``generate_presigned_url``: importing botocore and building its S3 client
takes about 0.4 s of a sampler's start-up (most of the time before its first request, on a
machine where s5cmd fetches 160 MiB in that time), and each URL costs about 0.3 ms of CPU in
its request pipeline, once per object GET. Signing is a few HMACs; this module is used where
its result is the same URL botocore would give: an explicit endpoint (path-style URLs),
credentials in the environment and nothing in an AWS config file that could change them
(:func:`light_settings` decides). Everywhere else, and for every call that is not a presigned
GET, :class:`~.s3.S3Remote` uses botocore.
tests/remote/test_sigv4.py compares the URLs with botocore's, byte for byte.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import quote, urlsplit
from urllib.request import getproxies, proxy_bypass

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED = "UNSIGNED-PAYLOAD"

LIST_PARAMS = {"Prefix": "prefix", "MaxKeys": "max-keys", "ContinuationToken": "continuation-token",
               "StartAfter": "start-after", "Delimiter": "delimiter", "EncodingType": "encoding-type"}
"""``ListObjectsV2``'s parameters (botocore's names) -> their query names."""

_BOTOCORE_ENV = ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_CREDENTIAL_EXPIRATION")
"""Settings under which botocore's credentials may differ from the environment's plain keys (a
named profile replaces them; an expiration makes them refreshable)."""


@dataclass(frozen=True)
class Light:
    """What signing needs, when it can be done without botocore."""

    endpoint: str
    """``scheme://host[:port]``, without a trailing slash."""
    region: str
    access_key: str
    secret_key: str
    token: str | None


def light_settings(endpoint_url: str | None, env: Mapping[str, str] | None = None) -> Light | None:
    """The settings of a botocore-free presigner, or None where botocore could sign differently:
    no explicit endpoint (AWS's own hosts: virtual-hosted addressing, regional endpoints), an
    endpoint with a path, a query or credentials in it, no access key and secret in the
    environment, a named profile, refreshable keys, or an AWS config file (which may set the
    region, the addressing style or the credentials). The region is botocore's: its
    ``AWS_DEFAULT_REGION`` (botocore does not read ``AWS_REGION``), else ``us-east-1``, which
    it signs with for an S3 client with no region."""
    env = os.environ if env is None else env
    if not endpoint_url:
        return None
    parts = urlsplit(endpoint_url)
    if (parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc
            or parts.path not in ("", "/") or parts.query or parts.fragment):
        return None
    access, secret = env.get("AWS_ACCESS_KEY_ID", ""), env.get("AWS_SECRET_ACCESS_KEY", "")
    if not access or not secret or any(env.get(name) for name in _BOTOCORE_ENV):
        return None
    config = env.get("AWS_CONFIG_FILE") or os.path.expanduser("~/.aws/config")
    if os.path.exists(config):
        return None
    token = env.get("AWS_SESSION_TOKEN") or env.get("AWS_SECURITY_TOKEN") or None
    return Light(f"{parts.scheme}://{parts.netloc}", env.get("AWS_DEFAULT_REGION") or "us-east-1",
                 access, secret, token)


def environ_proxies(url: str) -> dict[str, str]:
    """The environment's proxies for ``url``, as botocore's ``get_environ_proxies`` decides them
    (none where ``NO_PROXY`` covers the host): the same route as botocore's own client."""
    try:
        if proxy_bypass(urlsplit(url).netloc):
            return {}
    except (TypeError, OSError):
        pass
    return dict(getproxies())


def _host(endpoint: str) -> str:
    """The ``Host`` header for ``endpoint``, as botocore signs it: the port only when it is not
    the scheme's default."""
    parts = urlsplit(endpoint)
    default = {"http": 80, "https": 443}[parts.scheme]
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    return host if parts.port in (None, default) else f"{host}:{parts.port}"


class Presigner:
    """Presigned S3 URLs for one endpoint, region and set of credentials; thread-safe (the
    derived signing key, which changes once a day, is kept between calls)."""

    def __init__(self, light: Light, *, clock: Callable[[], float] = time.time) -> None:
        self.light = light
        self._host = _host(light.endpoint)
        self._clock = clock
        self._key: tuple[str, bytes] = ("", b"")  # (date, key): a Presigner has one region

    @property
    def region(self) -> str:
        return self.light.region

    def get_object(self, bucket: str, key: str, headers: Mapping[str, str], *, expires: int = 900) -> str:
        """``GetObject``'s URL, signed with ``headers`` (which must be sent as they are)."""
        return self.url(f"/{bucket}/{quote(key, safe='/~')}", {}, headers, expires=expires)

    def head_bucket(self, bucket: str, *, expires: int = 900) -> str:
        """``HeadBucket``'s URL (to be sent with ``HEAD``)."""
        return self.url(f"/{bucket}", {}, {}, expires=expires, method="HEAD")

    def list_objects_v2(self, bucket: str, params: Mapping[str, object], *, expires: int = 900) -> str:
        """``ListObjectsV2``'s URL for botocore-named ``params`` (``Prefix``, ``MaxKeys``...)."""
        query = {"list-type": "2"}
        query.update({LIST_PARAMS[name]: str(value) for name, value in params.items() if name != "Bucket"})
        return self.url(f"/{bucket}", query, {}, expires=expires)

    def url(self, path: str, query: Mapping[str, str], headers: Mapping[str, str], *,
            expires: int = 900, when: float | None = None, method: str = "GET") -> str:
        """A presigned ``method`` (``GET``, ``HEAD``) of ``path`` (already percent-encoded) with
        ``query`` (plain values) and the signed ``headers``."""
        now = time.gmtime(self._clock() if when is None else when)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", now)
        date = stamp[:8]
        light = self.light
        scope = f"{date}/{self.region}/s3/aws4_request"
        signed = {"host": self._host, **{name.lower(): value.strip() for name, value in headers.items()}}
        names = ";".join(sorted(signed))
        pairs = [(quote(k, safe="-_.~"), quote(v, safe="-_.~")) for k, v in query.items()]
        auth = [("X-Amz-Algorithm", ALGORITHM), ("X-Amz-Credential", f"{light.access_key}/{scope}"),
                ("X-Amz-Date", stamp), ("X-Amz-SignedHeaders", names), ("X-Amz-Expires", str(expires))]
        if light.token:
            auth.append(("X-Amz-Security-Token", light.token))
        pairs += [(k, quote(v, safe="-_.~")) for k, v in auth]
        canonical_query = "&".join(f"{k}={v}" for k, v in sorted(pairs))
        canonical_headers = "".join(f"{name}:{signed[name]}\n" for name in sorted(signed))
        request = "\n".join((method, path, canonical_query, canonical_headers, names, UNSIGNED))
        to_sign = "\n".join((ALGORITHM, stamp, scope, hashlib.sha256(request.encode()).hexdigest()))
        signature = hmac.new(self._signing_key(date), to_sign.encode(), hashlib.sha256).hexdigest()
        return f"{light.endpoint}{path}?{'&'.join(f'{k}={v}' for k, v in pairs)}&X-Amz-Signature={signature}"

    def _signing_key(self, date: str) -> bytes:
        cached_date, key = self._key
        if cached_date == date:
            return key
        key = ("AWS4" + self.light.secret_key).encode()
        for part in (date, self.region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        self._key = (date, key)
        return key
