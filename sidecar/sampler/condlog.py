"""Log lines for a condition that lasts (a full volume, a budget the disk clamps): said when it
starts, when it changes materially (at most once per :data:`EVERY`), and when it ends.

Why: the sampler meets a full volume once per write it tries, and measures its free space once a
second; a line per meeting made ~200 lines a minute for as long as the volume stayed full, which
buries the one line that says why sampling paused. The start-up wait for room already logs once
a minute (docs/reliability.md, section 2); this gives the running sampler the same rhythm.

A condition that flaps (ends and starts again within :data:`EVERY` of the last line) is not said
again at once: it is folded into the next "still" line, so a volume at its edge cannot make the
log grow faster than a couple of lines a minute either.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

EVERY = 60.0
"""Seconds between two lines about one condition while it lasts (its start and end aside)."""


class ConditionLog:
    """The lines of one lasting condition, told by :meth:`update` each time it is looked at."""

    def __init__(self, logger: logging.Logger, *, every: float = EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log = logger
        self.every = every
        self.clock = clock
        self.active = False
        self._said: float | None = None
        """When the last line about it was logged (None: never)."""
        self._said_open = False
        """A start or "still" line was logged for the episode now open: its end is said too."""
        self._pending = False
        """Something material happened since the last line (said at the next chance)."""

    def update(self, active: bool, *, material: bool = False, start: Callable[[], str],
               still: Callable[[], str], end: Callable[[], str]) -> None:
        """The condition is ``active`` now; ``material``: it changed enough to be said again.

        The messages are callables, built only when a line is due (the caller looks often)."""
        now = self.clock()
        due = self._said is None or now - self._said >= self.every
        if active and not self.active:
            self.active = True
            if due:
                self._say(logging.WARNING, start(), now)
                return
            self._pending = True  # a flap: told by the next "still" line
            return
        if active:
            self._pending = self._pending or material
            if self._pending and due:
                self._say(logging.WARNING, still(), now)
            return
        if self.active:
            self.active = False
            self._pending = False
            if self._said_open:
                self._said_open = False
                self._said = now
                self.log.info("%s", end())

    def _say(self, level: int, message: str, now: float) -> None:
        self.log.log(level, "%s", message)
        self._said = now
        self._said_open = True
        self._pending = False


class RepeatLog:
    """Warnings of one kind that recur with no end to say (a key skipped as too large, met again
    at each pass or relist): the first is said at once, then at most one per :data:`EVERY`, which
    counts those held back since. A catalog of such keys made one line per key and pass."""

    def __init__(self, logger: logging.Logger, *, every: float = EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log = logger
        self.every = every
        self.clock = clock
        self._said: float | None = None
        self.held = 0
        """Lines held back since the last one said."""

    def warn(self, message: Callable[[], str]) -> None:
        """Say ``message()`` if a line is due, else count it (built only when said)."""
        now = self.clock()
        if self._said is not None and now - self._said < self.every:
            self.held += 1
            return
        line = message()
        if self.held:
            line += f" ({self.held} more like it since the last line; said at most once a minute)"
        self.log.warning("%s", line)
        self._said = now
        self.held = 0


__all__ = ["EVERY", "ConditionLog", "RepeatLog"]
