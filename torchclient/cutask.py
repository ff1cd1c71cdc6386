"""Asking the sidecar for epoch N's cut over its loopback port: the folder view's lookup.

On the FUSE view, looking up ``epoch-N`` is what asks for its cut. A folder published by the sidecar
(``--view folder``, for clusters that forbid privileged containers) is plain files: nothing sees a
lookup. So while ``epoch-N/`` is missing, the waiting client also sends ``POST /v1/cut?epoch=N`` to
the sidecar it reports to (:mod:`.report`: ``EPOCHFS_REPORT_URL`` when set, which the Helm chart
does; else the ``report_url`` the mount's status.json names, the sidecar's ``--health-port``; else
port 8080; the base URL is its scheme and host), never through a proxy (:mod:`.sidecarhttp`).
The sidecar applies the store's rule for lookups (only the next epoch is cut or queued);
``jump=1`` is sent only when the caller asks for a jump (a resumed trainer starting above the
newest epoch + 1). On the FUSE view the request is redundant and harmless: the lookup has asked
already. Each request names the cache the mount's status.json names (``X-Epochfs-Cache``, as the
reports do: :mod:`.report`), and a sidecar serving another cache answers 409 and cuts nothing: a
failed request here, whose reason (the sidecar's, naming both caches) the waiting lines show.

Standard library only; failures (no sidecar, an older one without the endpoint, an older sidecar
on another ``--health-port`` than the default 8080, whose status.json names no URL) mean the
client waits as it would on any folder, so :class:`CutAsker` logs the first one at WARNING and the
waiting lines and errors name the URL tried, why it failed and ``EPOCHFS_REPORT_URL``.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from .layout import CUT_PATH, status_path
from .report import (
    CACHE_HEADER,
    DEFAULT_URL,
    ENV,
    cache_of_status,
    other_cache_reason,
    report_url_from_env,
    report_url_from_status,
    sidecar_of_status,
)
from .sidecarhttp import open_sidecar

log = logging.getLogger("epochfs.torchclient")


def sidecar_url_from_env() -> str | None:
    """``scheme://host:port`` of the sidecar, from ``EPOCHFS_REPORT_URL`` (None when it is off).

    A malformed value (``127.0.0.1:8080`` without ``http://``) raises the report's ValueError,
    which names the variable: taken as "off", it silently stopped the cut requests, and on the
    folder view a trainer then waited out its whole timeout for an epoch nobody asked for."""
    url = report_url_from_env()
    return None if url is None else base_of(url)


def base_of(report_url: str) -> str:
    """``scheme://host:port`` of a report URL: where the sidecar's other endpoints are."""
    parts = urlparse(report_url)
    return f"{parts.scheme}://{parts.netloc}"


@dataclass(frozen=True)
class CutFailure:
    """No answer from the cut endpoint: the URL tried and why (``connection refused``, ``HTTP 404 ...``)."""

    url: str
    reason: str


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


def request_cut(base_url: str, epoch: int, *, jump: bool = False, timeout: float = 2.0,
                cache: str | None = None) -> CutAnswer | CutFailure:
    """``POST <base>/v1/cut?epoch=N[&jump=1]``: the sidecar's answer, or why none came. ``cache``:
    the :data:`~.report.CACHE_HEADER` value (the mount's cache); a sidecar of another cache
    refuses the request, a failure here (its reason the sidecar's)."""
    query = f"epoch={epoch}" + ("&jump=1" if jump else "")
    url = f"{base_url}{CUT_PATH}"
    headers = {CACHE_HEADER: cache} if cache is not None else {}
    request = urllib.request.Request(f"{url}?{query}", data=b"", method="POST", headers=headers)
    try:
        with open_sidecar(request, timeout) as response:
            status, body = int(response.status), response.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    except (OSError, ValueError) as e:
        return CutFailure(url=url, reason=_why(e, timeout))
    try:
        doc: Any = json.loads(body)
    except ValueError:
        doc = None
    refused = other_cache_reason(status, doc)
    if refused is not None:  # a sidecar of another cache: no answer about this cache's epoch
        return CutFailure(url=url, reason=refused)
    if not isinstance(doc, dict) or "state" not in doc:
        # not the cut endpoint (an older sidecar's 404, a proxy's page, another server on the port)
        return CutFailure(url=url, reason=f"HTTP {status} without an epochfs cut answer")
    return CutAnswer(status=status, state=str(doc["state"]), message=str(doc.get("message", "")),
                     refused_for_good=doc.get("final") is True)


def ask_cut(base_url: str, epoch: int, *, jump: bool = False, timeout: float = 2.0) -> CutAnswer | None:
    """:func:`request_cut`, None when no sidecar answers with the endpoint."""
    got = request_cut(base_url, epoch, jump=jump, timeout=timeout)
    return got if isinstance(got, CutAnswer) else None


def _why(error: BaseException, timeout: float) -> str:
    """A request error in the words a user acts on: ``connection refused``, ``no answer within 2s``."""
    inner: object = error.reason if isinstance(error, urllib.error.URLError) else error
    if isinstance(inner, TimeoutError):
        return f"no answer within {timeout:g}s"
    text = (getattr(inner, "strerror", None) or str(inner) or type(inner).__name__) \
        if isinstance(inner, BaseException) else str(inner)
    return text[:1].lower() + text[1:]


URL_FROM_ENV = "env"
URL_FROM_STATUS = "status"
URL_DEFAULT = "default"
URL_GIVEN = "given"
URL_MOUNT_FAILING = "mount failing"
"""Where the sidecar's URL came from (:func:`url_source`): each has its own remedy."""


def _mount_failing(root: str | os.PathLike[str]) -> bool:
    """Whether ``root``'s status.json cannot be looked at for another reason than its absence (a
    dead FUSE mount answers ENOTCONN): the sidecar's URL is unknown, not wrong."""
    try:
        os.stat(status_path(root))
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
    return False


def url_source(root: str | os.PathLike[str] | None = None) -> str:
    """:data:`URL_FROM_ENV` when ``EPOCHFS_REPORT_URL`` is set, else :data:`URL_FROM_STATUS` when
    ``root``'s status.json names the sidecar's URL, else :data:`URL_DEFAULT` (port 8080)."""
    if ENV in os.environ:
        return URL_FROM_ENV
    return URL_FROM_STATUS if root is not None and report_url_from_status(root) else URL_DEFAULT


_WARNED: set[str] = set()
"""Cut URLs this process has warned about: once each, not once a second while a wait retries."""


class CutAsker:
    """Asks one sidecar for cuts and keeps why the last request got no answer.

    Why: a failed request only means "wait as on any folder", yet on the folder view nothing else
    cuts an epoch, and a sidecar on another ``--health-port`` than the default 8080 left a trainer
    waiting out its timeout with no hint. The failure is logged once at WARNING and :meth:`trouble`
    puts it, with the remedy, into the waiting lines and the errors."""

    def __init__(self, base_url: str, *, source: str, root: str | os.PathLike[str] | None = None) -> None:
        """``root``: the mount waited on, whose status.json names the sidecar's URL (read at the
        first ask, again after one fails); ``base_url`` is the fallback where it names none."""
        self.base_url = base_url
        self.source = source
        self.failure: CutFailure | None = None
        self._fallback = (base_url, source)
        self._root = root
        self._mount = root  # its status.json names the cache the requests are about
        self._looked = False
        self.cache: str | None = None
        """The :data:`~.report.CACHE_HEADER` value sent, read from the mount's status.json."""

    @classmethod
    def for_mount(cls, root: str | os.PathLike[str]) -> CutAsker | None:
        """The asker for a reader of ``root``: ``EPOCHFS_REPORT_URL``'s sidecar when it is set (a
        malformed value raises ValueError now; None when it says off), else the one ``root``'s
        status.json names, else port 8080's (:func:`.report.report_url`'s order)."""
        if ENV in os.environ:
            base = sidecar_url_from_env()
            if not base:
                return None
            asker = cls(base, source=URL_FROM_ENV)
            asker._mount = root  # the URL is the variable's; the cache is still the mount's
            return asker
        return cls(base_of(DEFAULT_URL), source=URL_DEFAULT, root=root)

    def _look(self) -> bool:
        """Take the URL the mount's status.json names (the fallback where it names none); True
        when that changed where requests go (only for an asker made with a ``root``); the cache it
        names is read with it."""
        self._looked = True
        if self._root is None:
            self.cache = cache_of_status(self._mount)
            return False
        named, self.cache = sidecar_of_status(self._root)
        base, source = (base_of(named), URL_FROM_STATUS) if named else self._fallback
        if not named and source == URL_DEFAULT and _mount_failing(self._root):
            source = URL_MOUNT_FAILING  # status.json unreadable: 8080 is a guess, not the mistake
        changed = base != self.base_url
        self.base_url, self.source = base, source
        return changed

    def ask(self, epoch: int, *, jump: bool = False) -> CutAnswer | None:
        """The sidecar's answer for ``epoch``, or None (the reason kept for :meth:`trouble`)."""
        cached = self._looked
        if not cached:
            self._look()
        got = request_cut(self.base_url, epoch, jump=jump, cache=self.cache)
        if isinstance(got, CutFailure) and cached and self._look():  # the sidecar named another URL since
            got = request_cut(self.base_url, epoch, jump=jump, cache=self.cache)
        if isinstance(got, CutAnswer):
            self.failure = None
            return got
        self.failure = got
        self._looked = False  # read status.json again before the next ask
        if got.url not in _WARNED:
            _WARNED.add(got.url)
            log.warning("epochfs: %s", self._says(got))
        return None

    def trouble(self) -> str:
        """``; cut requests to URL fail (reason): <remedy>`` while the last request failed, else ''."""
        return "" if self.failure is None else f"; {self._says(self.failure)}"

    def _says(self, failure: CutFailure) -> str:
        return f"cut requests to {failure.url} fail ({failure.reason}): {REMEDY[self.source]}"


_SET_IT = ("set EPOCHFS_REPORT_URL=http://127.0.0.1:PORT/v1/client-report, PORT being the "
           "sidecar's --health-port")
REMEDY = {
    URL_DEFAULT: ("EPOCHFS_REPORT_URL is unset and no report_url came from the mount's .epochfs/status.json "
                  "(where a sidecar records its --health-port; an older one does not), so the default port "
                  f"8080 was tried; {_SET_IT}"),
    URL_FROM_STATUS: ("EPOCHFS_REPORT_URL is unset, so the report_url the mount's .epochfs/status.json "
                      f"names was tried (the sidecar's --health-port at its start): is the sidecar running? "
                      f"To send elsewhere, {_SET_IT}"),
    URL_FROM_ENV: f"check EPOCHFS_REPORT_URL ({_SET_IT})",
    URL_GIVEN: "check the sidecar_url passed (http://127.0.0.1:PORT, PORT being the sidecar's --health-port)",
    URL_MOUNT_FAILING: ("the mount's .epochfs/status.json cannot be read (the mount itself is failing), "
                        "so the sidecar's report_url is unknown and the default port 8080 was tried: see "
                        "to the mount and its sidecar first"),
}
"""What to change, by where the URL came from (:func:`url_source`, or :data:`URL_GIVEN`)."""
