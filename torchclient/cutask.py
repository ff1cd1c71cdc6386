"""Asking the sidecar for epoch N's cut over its loopback port: the folder view's lookup.

On the FUSE view, looking up ``epoch-N`` is what asks for its cut. A folder published by the sidecar
(``--view folder``, for clusters that forbid privileged containers) is plain files: nothing sees a
lookup. So while ``epoch-N/`` is missing, the waiting client also sends ``POST /v1/cut?epoch=N`` to
the sidecar whose URL it already knows from ``EPOCHFS_REPORT_URL`` (the Helm chart sets it; the
base URL is its scheme and host). The sidecar applies the store's rule for lookups (only the next
epoch is cut or queued); ``jump=1`` is sent only when the caller asks for a jump (a resumed
trainer starting above the newest epoch + 1). On the FUSE view the request is redundant and
harmless: the lookup has asked already.

Standard library only; failures (no sidecar, an older one without the endpoint) only mean the
client waits as it would on any folder.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from .layout import CUT_PATH
from .report import report_url_from_env

log = logging.getLogger("epochfs.torchclient")


def sidecar_url_from_env() -> str | None:
    """``scheme://host:port`` of the sidecar, from ``EPOCHFS_REPORT_URL`` (None when it is off).

    A malformed value (``127.0.0.1:8080`` without ``http://``) raises the report's ValueError,
    which names the variable: taken as "off", it silently stopped the cut requests, and on the
    folder view a trainer then waited out its whole timeout for an epoch nobody asked for."""
    url = report_url_from_env()
    if url is None:
        return None
    parts = urlparse(url)
    return f"{parts.scheme}://{parts.netloc}"


@dataclass(frozen=True)
class CutAnswer:
    """The sidecar's answer: ``live`` (200), ``waiting`` (202), ``refused`` (409), ``gone`` (410)."""

    status: int
    state: str
    message: str
    refused_for_good: bool = False
    """The sidecar says asking again will not help (a jump too far: ``"final": true``)."""

    @property
    def final(self) -> bool:
        """The epoch can never appear (retired, or below the newest and never cut), or the
        sidecar refuses it for good (a jump of more than its limit)."""
        return self.state == "gone" or self.refused_for_good


def ask_cut(base_url: str, epoch: int, *, jump: bool = False, timeout: float = 2.0) -> CutAnswer | None:
    """``POST <base>/v1/cut?epoch=N[&jump=1]``; None when no sidecar answers with the endpoint."""
    query = f"epoch={epoch}" + ("&jump=1" if jump else "")
    request = urllib.request.Request(f"{base_url}{CUT_PATH}?{query}", data=b"", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, body = int(response.status), response.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    except (OSError, ValueError) as e:
        log.debug("epochfs: cut request to %s failed: %s", base_url, e)
        return None
    try:
        doc: Any = json.loads(body)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or "state" not in doc:
        return None  # not the cut endpoint (an older sidecar's 404, a proxy's page)
    return CutAnswer(status=status, state=str(doc["state"]), message=str(doc.get("message", "")),
                     refused_for_good=doc.get("final") is True)
