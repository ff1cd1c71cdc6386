"""Secrets out of everything epochfs prints: URLs with credentials, signed query strings.

A password can arrive inside an endpoint or remote URL (``http://user:pass@host``, the Helm chart's
``EPOCHFS_ENDPOINT_URL``) and a presigned URL carries a signature that grants access for a while.
Neither may reach a log line, an error message, status, a metric or an Event. Settings travel to the
sidecar's children through the environment, never the command line (``ps -ef`` shows that to any
user), and every log record passes through :class:`RedactingFilter`.
"""

from __future__ import annotations

import logging
import re

_USERINFO = re.compile(r"(?<=[A-Za-z0-9+.-])://(?P<userinfo>[^/\s@]+)@")
"""A URL's ``user[:password]@``, found from its ``://`` rather than from its scheme's first letter.
Linear in the text, whatever it holds: each position costs one look behind and a three-character
literal, and a userinfo ends at the next ``/`` (every ``://`` holds one), so no character is scanned
for two matches. A pattern that started at the scheme (``[A-Za-z][A-Za-z0-9+.-]*://``) would scan
the rest of a run of letters from each of its letters: a 200,000-letter value logged in a refusal
held the GIL for a minute. The scheme itself is never replaced, so it need not be matched."""
_SIGNED = re.compile(
    r"(?P<name>(?:X-Amz-Signature|X-Amz-Credential|X-Amz-Security-Token|Signature|sig|token|"
    r"access_token|AWSAccessKeyId)=)(?P<value>[^&\s\"']+)",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """``text`` with URL credentials and signature parameters replaced by ``***``."""
    text = _USERINFO.sub(lambda m: "://***:***@" if ":" in m["userinfo"] else "://***@", text)
    return _SIGNED.sub(lambda m: f"{m['name']}***", text)


class RedactingFilter(logging.Filter):
    """Redacts each record's final message (arguments merged), so no handler ever sees a secret."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact(message)
        if clean != message:
            record.msg, record.args = clean, None
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            text = redact(str(exc))
            if text != str(exc):
                record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return True


def install(logger: logging.Logger | None = None) -> None:
    """Put the filter on every handler of ``logger`` (default: the root logger)."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
