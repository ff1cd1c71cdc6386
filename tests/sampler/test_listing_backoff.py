"""The listing thread's pause after a failed run: full jitter, and the bound back to its minimum
once a run has committed a page (so a fleet's throttled nodes neither come back in step nor wait
a minute after every page they list)."""

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
from epochfs.sidecar.listing.background import RETRY_MIN
from epochfs.sidecar.listing.sources import Page, Span
from epochfs.sidecar.remote import RemoteObject
from epochfs.sidecar.remote_errors import Throttled
from epochfs.sidecar.store import Store


class ScriptedSource:
    """One span of ten keys in pages of two; each page asked for takes the next step of
    ``script``: ``ok`` answers it, ``slowdown`` raises a throttled failure (``ok`` once it runs out)."""

    name = "scripted"
    sorted_listing = True

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


def test_the_pause_is_jittered_and_starts_over_after_a_committed_page(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Run 1 lists a page, then is throttled; run 2 is throttled at once; run 3 lists a page and
    # is throttled; run 4 lists to the end.
    source = ScriptedSource(["ok", "slowdown", "slowdown", "ok", "slowdown"])
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
    # Doubling while nothing is committed (1, 2), back to the minimum after a committed page.
    assert bounds == [RETRY_MIN, 2 * RETRY_MIN, RETRY_MIN]
