"""Which skipped keys a listing logs one by one: each once, not again at every relist.

A listing skips unsafe keys, objects over the object limit and file/folder name clashes; the
store counts them in ``skipped_total`` once (a relist does not count them again), and logs them
once too: logged by every relist, the same hundred WARNING lines would come back for ever with
``--relist-interval`` set. A :class:`SkippedKeys` belongs to a :class:`~.lister.Lister` and lives
as long as it (the listing thread runs every relist on one lister), so a listing logs one by one:

* every skipped key, while the cache has no complete listing yet (its first listing, resumed
  as often as it is stopped);
* in a relist, only the keys the lister had not skipped in its earlier runs: a key uploaded
  since, or made a clash since. Every relist still logs its summary line, which counts the skips
  by reason.

A lister started on a cache listed before (a restart) knows none of the keys skipped then, so
its first listing logs none one by one (the summary says how many); it learns them, and its
later relists log the new ones. At most :data:`REMEMBERED` keys are remembered: past that, a
relist logs none one by one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

REMEMBERED = 100_000
"""Skipped keys a lister remembers at most (a few MB)."""


class SkippedKeys:
    """The keys a lister skipped in its runs so far (see the module doc)."""

    def __init__(self, limit: int = REMEMBERED) -> None:
        self._keys: set[object] = set()
        self._lock = threading.Lock()
        self.limit = limit
        self.known = False
        """A listing of this lister went to the end: every key it skipped is remembered."""

    def listing(self, *, first: bool) -> Callable[[object], bool]:
        """Whether a skipped key is logged one by one by the listing about to run; ``first``:
        the cache has no complete listing yet."""
        news = first or self.known

        def announce(key: object) -> bool:
            return self._remember(key) and news

        return announce

    def completed(self) -> None:
        """A listing went to the end: its relists log only the keys new to it."""
        self.known = True

    def _remember(self, key: object) -> bool:
        """True when ``key`` was not skipped before (remembered now, room permitting)."""
        with self._lock:
            if key in self._keys or len(self._keys) >= self.limit:
                return False
            self._keys.add(key)
            return True


__all__ = ["REMEMBERED", "SkippedKeys"]
