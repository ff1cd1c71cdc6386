"""The one line of a sampler that a remote refused at its start (exit 2): the flag, the store's
answer and what to check.

Apart from :mod:`.command` because it is wording, not the run: which flag names the refused URL
and which fix to give for each cause :func:`~epochfs.sidecar.remote.refusal.refusal_cause` finds.
The line a user reads first, in a terminal or in ``kubectl describe pod``'s termination message,
must say what to check, not only what the store answered.
"""

from __future__ import annotations

from urllib.parse import urlparse

from epochfs.sidecar.config import SamplerSettings
from epochfs.sidecar.remote import RemoteError
from epochfs.sidecar.remote.refusal import refusal_cause


def _host(url: str | None) -> str:
    """The host of ``url`` (never its userinfo), or "" for none."""
    return (urlparse(url).hostname or "") if url else ""


def _asked_host(flag: str, url: str, endpoint_url: str | None) -> tuple[str, str]:
    """(the flag that names it, the host) whose name a request for ``url`` looked up, "" for a
    host no flag names. An object store's URL holds a bucket or container, not a host: its
    requests go to ``--endpoint-url`` when given (the index on Azurite named the container
    ``ctr`` as the host that did not resolve), else to the store's own endpoint (an ``az://``
    URL may name its account's host: ``container@account.blob.core.windows.net``)."""
    from epochfs.sidecar.remote.objects import in_store
    from epochfs.sidecar.remote.urls import split_url

    if not in_store(url):
        return flag, _host(url)
    if endpoint_url:
        return "--endpoint-url", _host(endpoint_url)
    return flag, _host(url) if "@" in split_url(url).host else ""


def _plain_http_fix(flag: str, url: str) -> str:
    """The fix for an ``https://`` URL whose server answered the TLS handshake in plain HTTP
    (MinIO's and moto's default): the same URL with ``http://``."""
    host = urlparse(url).netloc.rpartition("@")[2]  # never the userinfo
    return f"{flag} is https:// but the server answered plain HTTP: use http://{host}"


def refusal_fix(settings: SamplerSettings, cause: str | None) -> tuple[str, str]:
    """(the flag to name, what to do) for a remote that refused the first listing, by the cause
    :func:`~epochfs.sidecar.remote.refusal.refusal_cause` found: the line a user reads first, in a
    terminal or in ``kubectl describe pod``'s termination message, must say what to check, not
    only what the store answered."""
    s3 = settings.remote.startswith("s3://")
    endpoint = settings.endpoint_url if s3 else None
    if settings.index_url:  # the first listing reads the index
        flag, url = "--index", settings.index_url
    elif endpoint and cause in ("host", "certificate", "scheme"):
        flag, url = "--endpoint-url", endpoint
    else:
        flag, url = "--remote", settings.remote
    if cause == "host" and url.startswith("s3://") and not settings.endpoint_url:
        # AWS answers every bucket's name (wildcard DNS): the name that failed is AWS's endpoint.
        fix = (f"AWS's S3 endpoint for bucket {_host(url) or url} does not resolve from this node "
               f"(S3 resolves every bucket name: not a typo in {flag}): check the node's DNS and "
               "egress (or AWS_DEFAULT_REGION / --endpoint-url)")
    elif cause == "host" and (asked := _asked_host(flag, url, settings.endpoint_url))[1]:
        fix = (f"check the host name in {asked[0]}: {asked[1]} does not resolve from this node "
               "(a typo, or a name only another network knows)")
    elif cause == "host":
        fix = (f"the store's endpoint for {flag} does not resolve from this node: check the node's "
               "DNS and egress (or --endpoint-url)")
    elif cause == "ca-bundle":  # the line names the setting and the path already
        fix = "point it at the CA's PEM file, or unset it for botocore's default bundle"
    elif cause == "certificate":
        fix = f"check {flag}'s host and its TLS certificate"
        fix += "; a private CA's bundle goes in AWS_CA_BUNDLE" if s3 else ""
    elif cause == "scheme":
        fix = _plain_http_fix(flag, url)
    elif cause == "aws-config":
        fix = ("check AWS_PROFILE (a profile of the AWS config file: AWS_CONFIG_FILE, else "
               "~/.aws/config), that file's syntax, and AWS_DEFAULT_REGION")
    elif cause == "credentials" and s3:
        fix = ("check the credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or "
               f"the pod's IAM role) must be a key {endpoint or 'S3'} accepts")
    elif cause == "credentials":
        fix = "check the credentials the store is given (its key, token or SAS)"
    elif cause == "access" and s3 and flag == "--remote":
        fix = (f"check that these credentials may list and read {settings.remote} (s3:ListBucket, "
               "s3:GetObject), and the bucket name in --remote")
    elif cause == "access":
        fix = f"check that {flag} may be read with these credentials (or by this user)"
    elif cause == "bucket":
        fix = ("check the bucket name in --remote (s3://BUCKET/prefix)" if s3 else
               "check the bucket or container name in --remote")
        fix += " and that --endpoint-url is the store that holds it" if endpoint else ""
    elif cause == "region":
        fix = "check the bucket's region: set AWS_DEFAULT_REGION to it"
        fix += ", or --endpoint-url to its region's endpoint" if endpoint else ""
    elif cause in ("missing", None) and flag == "--remote" and settings.remote.startswith("file:"):
        fix = "check the path in --remote: the folder must exist on this node"
    else:
        fix = f"check {flag}" + (" and --endpoint-url" if endpoint and flag == "--remote" else "")
    return flag, fix


def one_line(said: str) -> str:
    """A store's answer as one line: the exit's line is the last one on stderr, the one the
    sidecar reports and ``kubectl describe pod`` shows, and some answers span lines (gcsfs's 403:
    ``Forbidden: <path>`` and GCS's message under it; the Azure SDK's: the message, its request
    id, time and code, then ``Content:`` and the answer's body, which repeats the message and is
    left out)."""
    lines: list[str] = []
    for line in said.splitlines():
        if line.startswith("Content:"):
            break
        if line.strip():
            lines.append(line.strip())
    return " ".join(lines)


def refusal_message(settings: SamplerSettings, e: RemoteError) -> str:
    """The one line of an exit 2 at the start: the flag, the store's answer, and the fix."""
    flag, fix = refusal_fix(settings, refusal_cause(e))
    return f"{flag}: {one_line(str(e)).rstrip('. ')}; {fix}"


__all__ = ["one_line", "refusal_fix", "refusal_message"]
