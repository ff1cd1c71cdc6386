"""Setting a ``threading.Event`` from a signal handler without a deadlock.

A Python signal handler runs on the main thread between two bytecodes, possibly while that same
thread holds the event's internal lock: inside ``Event.wait`` as it enters or leaves its condition,
or inside an ``Event.set`` of a first signal when a second one lands (a sampler gets SIGTERM from its
supervisor and, as the supervisor exits, again from PR_SET_PDEATHSIG). ``Event.set`` in the handler
then waits forever for a lock its own thread holds: seen as a sampler that never exited. So the
handler only notes the signal and hands ``set()`` to a short-lived thread, which takes the lock once
the main thread lets go of it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})
"""The signals that stop a command (``kill PID``, Ctrl-C, a closed terminal): unblocked as every
command starts (a blocked signal stays blocked through exec). The FUSE server then blocks the
same three again in every thread and takes them on a thread of its own (``StopSignals``)."""


def set_from_handler(event: threading.Event, *, then: Callable[[], None] | None = None) -> None:
    """Set ``event`` (and call ``then``) from a signal handler, without taking a lock here."""

    def run() -> None:
        event.set()
        if then is not None:
            then()

    threading.Thread(target=run, name="epochfs-signal", daemon=True).start()
