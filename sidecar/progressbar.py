"""Progress of long CLI work (``epochfs verify``, ``epochfs index``): a bar redrawn in place on a
terminal, plain lines every few seconds anywhere else (a pod's log, a pipe, a CI job).

Why both: a bar is what a person at a terminal reads at a glance (how far, how fast, how long
left), but written to a log it is hundreds of carriage-return frames on one line; a log wants one
complete line every few seconds. The choice is made once, from whether the stream is a TTY.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

WIDTH = 30
"""Characters of the bar."""
REDRAW = 0.1
"""Seconds between two frames of the bar at most (a terminal does not need more)."""


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds + 0.5))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Progress:
    """``update(done, total, detail)`` as the work goes; ``close()`` at the end (the bar's line
    ends; nothing more is written in line mode). ``total`` may be None (unknown: no bar, no
    estimate, a count)."""

    def __init__(self, what: str, *, out: TextIO, unit: str = "", every: float = 5.0,
                 tty: bool | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        self.unit = f" {unit}" if unit else ""
        self.out = out
        self.every = every
        self.tty = out.isatty() if tty is None else tty
        self.clock = clock
        self.started = clock()
        self._last = self.started if not self.tty else -1e18
        self._drawn = False

    def line(self, done: int, total: int | None, detail: str = "") -> str:
        """The text of one report: ``verify: [######....]  45% 4,500/10,000 objects ~30s left, 1.2 MiB/s``."""
        elapsed = max(self.clock() - self.started, 1e-9)
        parts = [self.what]
        if total:
            share = min(1.0, done / total)
            if self.tty:
                filled = int(WIDTH * share)
                parts.append(f"[{'#' * filled}{'.' * (WIDTH - filled)}] {100 * share:3.0f}%")
            parts.append(f"{done:,}/{total:,}{self.unit}")
            if 0 < done < total:
                parts.append(f"~{_duration(elapsed * (total - done) / done)} left")
        else:
            parts.append(f"{done:,}{self.unit}")
        text = " ".join(parts)
        return f"{text}, {detail}" if detail else text

    def update(self, done: int, total: int | None, detail: str = "") -> None:
        now = self.clock()
        if self.tty:
            if now - self._last < REDRAW:
                return
            self._last = now
            self.out.write("\r\x1b[2K" + self.line(done, total, detail))
            self._drawn = True
        else:
            if self.every <= 0 or now - self._last < self.every:
                return
            self._last = now
            self.out.write(self.line(done, total, detail) + "\n")
        self.out.flush()

    def close(self, done: int | None = None, total: int | None = None, detail: str = "") -> None:
        """End the bar's line (its last frame drawn with ``done`` when given)."""
        if self.tty and (self._drawn or done is not None):
            if done is not None:
                self.out.write("\r\x1b[2K" + self.line(done, total, detail))
            self.out.write("\n")
            self.out.flush()


__all__ = ["Progress"]
