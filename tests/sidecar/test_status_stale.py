"""``epochfs status --mount`` says when the ``status.json`` it shows is stale.

A running sidecar keeps the view's ``status.json`` fresh (the FUSE view renders it at each open,
the folder view rewrites it every second). A folder view whose volume is full cannot rewrite it:
the file keeps its version from before the pause, ``publish_paused`` unset and old counts, and
status showed that as the truth (a reviewer saw "publish_paused None, cuts 0" 38 s old while
``epochfs_publish_paused`` said 1). The document carries its ``time``: status now says how old it
is, and where to look instead. The folder here holds what the publisher writes (a real store's
``Store.stats()`` through ``layout.format_status``) with its clock set back, as a paused view leaves
it, so no test waits for a file to age.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from store_helpers import put

from epochfs.sidecar import status
from epochfs.sidecar.store import Policy, Store
from epochfs.torchclient import layout

STALE = re.compile(r"^STALE: this status was written (\d+) s ago .*epochfs status --cache", re.M)


def _status(args: list[str]) -> str:
    env = {k: v for k, v in os.environ.items() if k != "EPOCHFS_CACHE"}  # no sidecar's cache here
    proc = subprocess.run([sys.executable, "-m", "epochfs.sidecar.cli", "status", *args],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _published(tmp_path: Path, age: float) -> tuple[Path, Path]:
    """A cache with one epoch and a folder view whose status.json was written ``age`` s ago."""
    cache = tmp_path / "cache"
    with Store(cache, create=True) as store:
        store.configure(Policy(capacity=10_000, min_samples=1))
        put(store, "train/a.bin", 100)
        store.cut()
        doc = store.stats().to_json()
    view = tmp_path / "view"
    (view / layout.CONTROL_DIR).mkdir(parents=True)
    doc["time"] = float(doc["time"]) - age  # type: ignore[arg-type]
    (view / layout.CONTROL_DIR / layout.STATUS_NAME).write_text(layout.format_status(doc))
    return cache, view


def test_the_mounts_status_says_its_status_json_is_stale(tmp_path: Path) -> None:
    cache, view = _published(tmp_path, age=120.0)
    text = _status(["--mount", str(view)])
    found = STALE.search(text)
    assert found is not None, text
    assert int(found.group(1)) >= 120
    assert text.splitlines()[0].startswith(found.group(0))  # said first, before the numbers it qualifies
    assert "cache [" in text and "     0         1" in text  # the document is still shown
    # The index itself is never stale: --cache reads it now.
    assert STALE.search(_status(["--cache", str(cache)])) is None


def test_a_fresh_status_json_says_nothing_of_its_age(tmp_path: Path) -> None:
    _, view = _published(tmp_path, age=0.0)
    assert STALE.search(_status(["--mount", str(view)])) is None


def test_the_age_is_judged_against_the_clock_given() -> None:
    doc = {"cache_bytes": 0, "capacity_bytes": 100, "samples": 0, "fetched_total": 0, "evicted_total": 0,
           "skipped_total": 0, "backpressure": False, "epochs": [], "time": 1000.0}
    assert STALE.search(status.render(doc, now=1000.0 + status.STATUS_STALE_AFTER)) is None
    found = STALE.search(status.render(doc, now=1038.0 + status.STATUS_STALE_AFTER))
    assert found is not None and int(found.group(1)) == 38 + int(status.STATUS_STALE_AFTER)
    assert STALE.search(status.render({**doc, "time": None}, now=1e12)) is None
    # wall-clock now by default: a document from 1970 is stale today
    assert STALE.search(status.render(doc)) is not None
