"""A child's output: its lines copied to the supervisor's stderr, and the reason it gave.

Apart from :mod:`.children` (which starts the process and reads this module's results) to keep
that module small: this is the part that parses what a child says, never how it runs.
"""

from __future__ import annotations

import contextlib
from typing import IO, TYPE_CHECKING

from epochfs.sidecar.config import EXIT_RETRY
from epochfs.sidecar.redact import redact

if TYPE_CHECKING:
    from epochfs.sidecar.supervisor.children import Child

REASON_MAX = 300
"""Characters of a reason kept for /readyz and status: one line, never a traceback."""


def retry_reason(last_error: str, name: str) -> str:
    """The reason of a transient failure from the child's last ``epochfs <command>: <reason>``
    line: one line, credentials and signatures redacted, at most :data:`REASON_MAX` characters."""
    reason = last_error.split(": ", 1)[1] if last_error.startswith("epochfs ") and ": " in last_error else ""
    reason = reason.removeprefix("the remote cannot be reached now: ")  # shown after "remote unreachable: "
    reason = redact(" ".join(reason.split())) or f"{name} exited with status {EXIT_RETRY}"
    return reason if len(reason) <= REASON_MAX else reason[:REASON_MAX - 1] + "…"


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


__all__ = ["REASON_MAX", "pump_log", "retry_reason"]
