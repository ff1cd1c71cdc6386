"""The S3 endpoint botocore takes when no ``--endpoint-url`` is given: from the environment or
from the AWS config file, in botocore's order, read without botocore (a start's import of it
costs a tenth of a second). The cache records it as the store it was filled from
(:mod:`epochfs.sidecar.sampler.identity`): one bucket name at two endpoints is two datasets.

botocore's order (``configprovider``'s endpoint lookup): ``AWS_ENDPOINT_URL_S3``;
``AWS_ENDPOINT_URL``; the ``s3`` ``endpoint_url`` of the ``[services NAME]`` section the profile
names; the profile's own ``endpoint_url``. ``AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true`` (or the profile's
``ignore_configured_endpoint_urls``) turns all of them off.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Mapping


def configured_s3_endpoint(environ: Mapping[str, str]) -> str:
    """The endpoint an S3 client made with no ``endpoint_url`` uses, "" for AWS's own."""
    parser = _config(environ)
    profile = _profile(parser, environ) if parser is not None else {}
    if _true(environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")) or \
            _true(profile.get("ignore_configured_endpoint_urls")):
        return ""
    for name in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        if environ.get(name):
            return environ[name]
    if parser is None:
        return ""
    return _service_endpoint(parser, profile.get("services", "")) or profile.get("endpoint_url", "").strip()


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


def _config(environ: Mapping[str, str]) -> configparser.RawConfigParser | None:
    """The AWS config file (``AWS_CONFIG_FILE``, else ``~/.aws/config``); None where there is
    none or it cannot be read as one (botocore refuses such a file as the client is made)."""
    path = environ.get("AWS_CONFIG_FILE") or os.path.join(environ.get("HOME") or os.path.expanduser("~"),
                                                           ".aws", "config")
    parser = configparser.RawConfigParser()
    try:
        read = parser.read(os.path.expanduser(path))
    except (configparser.Error, UnicodeDecodeError):
        return None
    return parser if read else None


def _profile(parser: configparser.RawConfigParser, environ: Mapping[str, str]) -> dict[str, str]:
    """The settings of the profile botocore uses (``AWS_PROFILE``, else ``AWS_DEFAULT_PROFILE``,
    else ``default``)."""
    name = environ.get("AWS_PROFILE") or environ.get("AWS_DEFAULT_PROFILE") or "default"
    for section in ((name, f"profile {name}") if name == "default" else (f"profile {name}",)):
        if parser.has_section(section):
            return dict(parser.items(section))
    return {}


def _service_endpoint(parser: configparser.RawConfigParser, services: str) -> str:
    """The ``s3`` ``endpoint_url`` of the ``[services NAME]`` section (its nested lines)."""
    section = f"services {services.strip()}"
    if not services.strip() or not parser.has_section(section):
        return ""
    for line in parser.get(section, "s3", fallback="").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "endpoint_url":
            return value.strip()
    return ""


__all__ = ["configured_s3_endpoint"]
