"""The in-use window as the FUSE server applies it, and following it when the sampler changes it.

The window (``--in-use-seconds`` of ``epochfs sidecar`` / ``epochfs sample``) lives in the store's
index: the sampler records it at its start (:meth:`~epochfs.sidecar.store.Store.configure`) and
retirement reads it there. The server derives two things from it: the kernel's entry and attribute
timeout (:func:`cache_timeout`) and the debounce of its read records (:func:`read_debounce`).

Reading the window once, at the server's start, is not enough. Under ``epochfs sidecar`` the FUSE
server and the sampler start together, and the server reads the index before the sampler's recovery
and ``configure`` are done: a sidecar restarted with another ``--in-use-seconds`` would log the
window of its last run ("in-use window 60s: ... at least 39s") and serve with its timeout and
debounce for as long as it ran, while retirement uses the new one. :class:`WindowFollower` re-reads
the window at each refresh of the view (one small read) and applies a change to the running server,
with one log line giving the new window and the pause it guarantees.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from epochfs.sidecar.store import EpochReader

log = logging.getLogger("epochfs.fuse")

MIN_TIMEOUT = 1.0
MAX_TIMEOUT = 3600.0
MAX_READ_DEBOUNCE = 10.0


def cache_timeout(in_use_seconds: float) -> float:
    """Entry/attribute timeout: long, but short enough that a reader's lookups keep its epoch pinned.

    The kernel asks again for ``epoch-N`` once its entry expires, and that lookup is what records
    the epoch as in use; three chances per ``in_use_seconds`` window keep it pinned while read.
    """
    return max(MIN_TIMEOUT, min(MAX_TIMEOUT, in_use_seconds / 3.0))


def read_debounce(in_use_seconds: float) -> float:
    """Seconds between two recorded reads of one epoch: at most 10 s, and a sixth of the window, so
    a held epoch (an open folder handle) is renewed several times per window, however short."""
    return max(0.0, min(MAX_READ_DEBOUNCE, in_use_seconds / 6.0))


def guaranteed_pause(in_use_seconds: float) -> float:
    """How long a reader that stopped reading (and holds nothing open) may pause before its epoch
    can retire: the window, less what the kernel's entry cache and the debounce may hide of its
    last read (its last lookup the server saw can be one timeout and one debounce older).
    600 s (the default window) gives 390 s."""
    return max(0.0, in_use_seconds - cache_timeout(in_use_seconds) - read_debounce(in_use_seconds))


def describe(in_use_seconds: float) -> str:
    """The log line's words for a window (docs/mount.md quotes them)."""
    return (f"in-use window {in_use_seconds:g}s: an epoch held open stays; one read from stays at "
            f"least {guaranteed_pause(in_use_seconds):g}s after the last read")


class WindowFollower:
    """Applies the store's current in-use window to a running server.

    ``apply(seconds)`` sets the server's timeout and debounce for ``seconds``; :meth:`check`
    (called at each refresh of the view) re-reads the window and calls it when it changed."""

    def __init__(self, store: EpochReader, seconds: float, apply: Callable[[float], None]) -> None:
        self.store = store
        self.seconds = seconds
        self.apply = apply

    def check(self) -> bool:
        """Re-read the window; True when it changed (applied, and logged once)."""
        seconds = self.store.policy().in_use_seconds
        if seconds == self.seconds:
            return False
        old, self.seconds = self.seconds, seconds
        self.apply(seconds)
        log.info("%s (it was %gs: the sampler records its --in-use-seconds); entry/attr timeout "
                 "now %.0fs", describe(seconds), old, cache_timeout(seconds))
        return True
