"""The listing thread's pause after a failed run: full jitter, the bound doubled after a run that
committed nothing and kept (not reset) after one that committed a page, so a fleet's throttled
nodes neither come back in step nor come back within a second of every SlowDown (the reset to the
minimum after each committed page did: docs/scale.md, the fleet model); it starts over only after
a run that listed for a quiet while."""

from __future__ import annotations

import logging
import random
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import wait_until

from epochfs.sidecar.listing import Lister, ListingThread
from epochfs.sidecar.listing.background import QUIET, RETRY_MAX, RETRY_MIN, pause_bound
from epochfs.sidecar.listing.span import Page, Span
from epochfs.sidecar.remote import RemoteObject
from epochfs.sidecar.remote.errors import Throttled
from epochfs.sidecar.store import Store


class ScriptedSource:
    """One span of ten keys in pages of two; each page asked for takes the next step of
    ``script``: ``ok`` answers it, ``slowdown`` raises a throttled failure (``ok`` once it runs out)."""

    name = "scripted"
    sorted_listing = True
    shuffled = False

    def __init__(self, script: list[str]) -> None:
        self.script = list(script)
        self.keys = [f"k{i:02d}" for i in range(10)]

    def spans(self) -> list[Span]:
        return [Span("", "", None)]

    def pages(self, span: Span, after: str) -> Iterator[Page]:
        at = int(after or 0)
        while True:
            if (self.script.pop(0) if self.script else "ok") == "slowdown":
                raise Throttled("HTTP 503 SlowDown")
            objects = [RemoteObject(k, 1, "v") for k in self.keys[at:at + 2]]
            at += len(objects)
            yield Page(objects, str(at), at >= len(self.keys))


class NoWait(random.Random):
    """The pause's random draw at its lower end: the test does not sleep through the pauses."""

    def uniform(self, a: float, b: float) -> float:
        return a


def test_the_pause_is_jittered_doubles_and_is_kept_after_a_committed_page(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Runs 1-3 are throttled at once; runs 4 and 5 each list a page, then are throttled; run 6
    # lists to the end.
    source = ScriptedSource(["slowdown", "slowdown", "slowdown", "ok", "slowdown", "ok", "slowdown"])
    store = Store(tmp_path / "cache", create=True)
    stop = threading.Event()
    caplog.set_level(logging.WARNING, logger="epochfs.catalog")
    listing = ListingThread(Lister(store, source, seed=0, threads=1, stop=stop), rng=NoWait())
    listing.start()
    try:
        wait_until(lambda: listing.completed == 1, timeout=30, what="the listing to its end")
    finally:
        stop.set()
        listing.join(timeout=10)
        store.close()
    bounds = [float(m.group(1)) for r in caplog.records
              if (m := re.search(r"listing failed: .*SlowDown.*full jitter up to (\d+)s", r.getMessage()))]
    # Doubling while nothing is committed (1, 2, 4), kept after each committed page (4, 4): the
    # reset to the minimum gave 1 after the first committed page.
    assert bounds == [RETRY_MIN, 2 * RETRY_MIN, 4 * RETRY_MIN, 4 * RETRY_MIN, 4 * RETRY_MIN]


def test_the_bound_starts_over_only_after_a_quiet_run_and_stays_within_its_limits() -> None:
    # The rule itself (the listing thread's runs above last far less than QUIET).
    assert pause_bound(8.0, 3, QUIET - 1) == 8.0
    assert pause_bound(8.0, 3, QUIET) == RETRY_MIN  # a run that listed for a quiet while
    assert pause_bound(8.0, 0, QUIET) == 16.0  # nothing committed, however long it took
    assert [pause_bound(None, 0), pause_bound(RETRY_MAX, 0), pause_bound(None, 5)] == [
        RETRY_MIN, RETRY_MAX, RETRY_MIN]
