"""The running sampler's outage of the remote, as the index records it (:data:`Meta.OUTAGE`).

Why in the index: a remote that goes down mid-run, or refuses the credentials (S3's
``InvalidAccessKeyId`` after a rotated Secret, an expired session token), is no exit of the
sampler: its outage breaker (``sidecar/sampler/breaker.py``) keeps the keys and pauses. The
supervisor's ``/readyz`` and ``/healthz``, the mount's ``status.json`` and ``epochfs status``
must name that outage and its cause, and the index is what the sampler shares with all of them
(as it shares its backpressure). The sampler writes the record at each pause of the breaker and
removes it when the remote answers again and at its own start (a run killed with -9 leaves its
record behind: ``sidecar/sampler/outagerecord.py``).

The record is small JSON: ``cause`` (a key of :data:`CAUSES`), ``since`` (wall clock, when this
cause began), ``objects`` (failed in a row), ``error`` (one line, redacted and capped by its writer)
and ``pid`` (the sampler's, so a reader that knows the running sampler's pid can tell a record of
another run). Its words are rendered here, one wording for every reader (:attr:`Outage.words`).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

CAUSES = {"credentials_refused": "remote refuses the credentials", "remote_unavailable": "remote unavailable"}
"""Each outage cause's bounded name (``/readyz``'s ``outage_cause``, the ``cause`` label of
``epochfs_remote_outage``) and its words, which the breaker's pause line uses too."""

ERROR_MAX = 300
"""Characters of the error kept in the record: one line, never a traceback."""

ADVICE = {
    "credentials_refused": ("fetching paused, keys kept; new credentials mend it (a rotated Secret is "
                            "read again at each try; keys in the environment need a pod restart)"),
    "remote_unavailable": "fetching paused, keys kept; tried again with a growing pause (at most 60 s)",
}
"""What the sampler does meanwhile and what mends it, after each cause's words."""


@dataclass(frozen=True)
class Outage:
    """One outage as the sampler recorded it at its last pause."""

    cause: str
    """A key of :data:`CAUSES`."""
    since: float
    """Wall-clock time this cause began."""
    objects: int
    """Objects that failed in a row at the last pause."""
    error: str
    """The last failure, one line, redacted and capped."""
    pid: int
    """The sampler process that recorded it."""

    @property
    def words(self) -> str:
        """``remote refuses the credentials since 14:15:48 UTC (9 objects in a row): <error>;
        <advice>``: what ``/readyz``, ``/healthz`` and status show."""
        since = time.strftime("%H:%M:%S UTC", time.gmtime(self.since))
        return (f"{CAUSES[self.cause]} since {since} ({self.objects} objects in a row): "
                f"{self.error}; {ADVICE[self.cause]}")

    def to_json(self) -> str:
        """The value of :data:`Meta.OUTAGE`."""
        return json.dumps(asdict(self), sort_keys=True)


def cap_error(error: str) -> str:
    """``error`` as one line of at most :data:`ERROR_MAX` characters (its writer redacts it first)."""
    line = " ".join(error.split())
    return line if len(line) <= ERROR_MAX else line[:ERROR_MAX - 1] + "…"


def parse(text: str | None) -> Outage | None:
    """The outage a :data:`Meta.OUTAGE` value records; None for none, or a value that cannot be
    read (a record of another version is no outage to show)."""
    if not text:
        return None
    try:
        doc: Any = json.loads(text)
        outage = Outage(cause=str(doc["cause"]), since=float(doc["since"]), objects=int(doc["objects"]),
                        error=str(doc["error"]), pid=int(doc["pid"]))
    except (ValueError, TypeError, KeyError):
        return None
    return outage if outage.cause in CAUSES else None


__all__ = ["ADVICE", "CAUSES", "ERROR_MAX", "Outage", "cap_error", "parse"]
