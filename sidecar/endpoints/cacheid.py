"""Which cache a client request is about: the ``X-Epochfs-Cache`` header checked against this sidecar's.

Why: the torch client finds its sidecar through the ``report_url`` the mount's status.json names, or
port 8080 where it names none. That URL outlives the sidecar that recorded it (a sidecar killed, a
cache served later by ``epochfs mount`` alone), and another sidecar may listen on that port since:
its cut requests then cut the other cache's epochs, and its reports count as the other trainer's
reads (client metrics, in-use pins). So the client sends the cache it reads, as the mount's
status.json names it (``shard.node``: ``<host>:<cache>``, percent-encoded), and a sidecar answers
409 for another cache's requests. A request without the header (an older client, curl) is taken as
before.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

from epochfs.sidecar.endpoints.http11 import Reply

OTHER_CACHE = "other_cache"
"""The ``state`` of the 409 answer to another cache's request (the torch client's
:func:`~epochfs.torchclient.report.other_cache_reason` looks for it)."""


def header_value(raw: bytes) -> str:
    """The header's value as sent (percent-encoded UTF-8, so any path fits an HTTP header)."""
    return unquote(raw.decode("latin-1"), errors="surrogateescape")  # a non-UTF-8 path as the view spells it


@dataclass(frozen=True)
class CacheIdentity:
    """This sidecar's cache as the views name it in status.json (``<host>:<absolute cache path>``)."""

    host: str
    path: str

    @classmethod
    def of(cls, cache: str | os.PathLike[str]) -> CacheIdentity:
        """The identity of ``cache`` on this host, spelled as the views spell it."""
        return cls(socket.gethostname(), os.path.abspath(cache))

    @property
    def name(self) -> str:
        return f"{self.host}:{self.path}"

    def serves(self, asked: str) -> bool:
        """Whether ``asked`` (a client's header) names this cache: the same host and the same
        folder, however its path is spelled (a symlink, ``..``). May stat: call off the I/O loop."""
        if asked == self.name:
            return True
        host, sep, path = asked.partition(":")
        if not sep or host != self.host or not os.path.isabs(path):
            return False
        try:
            return os.path.samefile(path, self.path)
        except (OSError, ValueError):
            return False

    def refusal(self, asked: str, what: str) -> Reply:
        """The 409 for a request about another cache: JSON naming both, which the client logs."""
        message = (f"this sidecar serves the cache {self.name}, not {asked} (the cache of the mount "
                   f"the {what} came from): the URL it was sent to (EPOCHFS_REPORT_URL, or the "
                   "report_url of the mount's status.json, which a sidecar that has stopped leaves) "
                   "is another cache's sidecar; start that cache's sidecar, or set "
                   "EPOCHFS_REPORT_URL to its --health-port")
        doc = {"state": OTHER_CACHE, "message": message, "cache": self.name, "asked": asked}
        return Reply(409, json.dumps(doc, sort_keys=True).encode() + b"\n", "application/json")


def identity(cache: str | os.PathLike[str] | None) -> CacheIdentity | None:
    """:meth:`CacheIdentity.of`, None without a cache (then every request is taken)."""
    return None if cache is None else CacheIdentity.of(Path(cache))
