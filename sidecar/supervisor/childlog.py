"""A child's output: its lines copied to the supervisor's stderr, and the reason it gave.

Apart from :mod:`.children` (which starts the process and reads this module's results) to keep
that module small: this is the part that parses what a child says, never how it runs.
"""

from __future__ import annotations

import contextlib
from typing import IO, TYPE_CHECKING

from epochfs.sidecar.config import EXIT_RETRY
from epochfs.sidecar.redact import redact
from epochfs.sidecar.store.snapshot import DISK_FULL

if TYPE_CHECKING:
    from epochfs.sidecar.supervisor.children import Child

REASON_MAX = 300
"""Characters of a reason kept for /readyz and status: one line, never a traceback."""


REMOTE_UNREACHABLE = "remote unreachable"
"""How a transient exit's reason begins when the remote could not be reached at the start."""


def no_room(last_error: str) -> bool:
    """Whether a transient exit's last line (``epochfs sample: <reason>``) refused ``--cache``:
    the volume too full for the start to write the index (``--cache: …: the cache's volume is
    full …; waiting for room``: the store's ``NoRoom``). The sampler's other exit 75, the remote
    unreachable, begins ``the remote cannot be reached now:``, never with the flag."""
    return _refuses_cache(_said(last_error))


def _said(last_error: str) -> str:
    """The reason of a child's last ``epochfs <command>: <reason>`` line ("" for another line)."""
    return last_error.split(": ", 1)[1] if last_error.startswith("epochfs ") and ": " in last_error else ""


def _refuses_cache(said: str) -> bool:
    """Whether a reason is about ``--cache`` (``--cache: …``, ``--cache PATH: …``)."""
    return said.startswith(("--cache:", "--cache "))


def waiting_words(last_error: str, name: str) -> str:
    """``remote unreachable: <reason>`` or, for :func:`no_room`, ``disk full: <reason>``: what
    /readyz, /healthz, ``epochfs status`` and the mount's status.json say while the child waits
    for its next start. Never the remote for a full disk: the operator would check credentials,
    DNS and egress instead of the volume."""
    kind = DISK_FULL if no_room(last_error) else REMOTE_UNREACHABLE  # DISK_FULL: the store's pause
    return f"{kind}: {retry_reason(last_error, name)}"


def retry_reason(last_error: str, name: str) -> str:
    """The reason of a transient failure from the child's last ``epochfs <command>: <reason>``
    line: one line, credentials and signatures redacted, at most :data:`REASON_MAX` characters."""
    # shown after "remote unreachable: "
    reason = _said(last_error).removeprefix("the remote cannot be reached now: ")
    reason = redact(" ".join(reason.split())) or f"{name} exited with status {EXIT_RETRY}"
    return reason if len(reason) <= REASON_MAX else reason[:REASON_MAX - 1] + "…"


def volume_refusal(child: Child) -> bool:
    """Whether ``child``'s exit 2 refused ``--cache`` (``epochfs sample: --cache PATH: cannot
    write in it: read-only file system``). The sidecar's own start ran the same check on the
    same cache and opened its index there (cli, core), so this is the volume changed under
    the running sidecar (ext4 ``errors=remount-ro``, a failing disk), not a setting: a crash,
    restarted with backoff and counted for ``/healthz``, where a stop would take the mount,
    which still serves what the volume holds. The sampler's lock refused (``epochfs sample:
    --cache: PATH is in use by another epochfs sample``) is one too: another sampler, run by
    hand, holds the cache now; it may be gone by the next start, and this sidecar, which owns
    the cache (its sidecar lock), must not stop and take its trainer's view with it."""
    said = child.last_error.removeprefix(f"epochfs {child.argv[0]}: ")
    return said != child.last_error and _refuses_cache(said)


def pump_log(child: Child, stream: IO[bytes], sink: IO[str]) -> None:
    """Copy a child's output to the supervisor's stderr, one prefixed line at a time (and keep its
    last error line: the reason of an exit 2)."""
    name = child.name
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", errors="replace").rstrip("\n")
        if line.startswith("epochfs "):
            child.last_error = line
        with contextlib.suppress(ValueError, OSError):
            sink.write(f"[{name}] {line}\n")
            sink.flush()
    stream.close()


__all__ = ["REASON_MAX", "REMOTE_UNREACHABLE", "no_room", "pump_log", "retry_reason",
           "volume_refusal", "waiting_words"]
