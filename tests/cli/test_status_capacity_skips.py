"""``epochfs status`` after a listing whose every object was over the object limit names the limit,
not the prefix.

Before: ``epochfs sample --capacity 1000`` over objects of 2 KiB rightly exited 2 ("every object of
this shard is larger than the object limit 750 B"), and ``epochfs status`` then said "WARNING: 0
objects under … for this node: check --remote's prefix" beside "errors: 5 object(s) skipped": the
prefix was right, the capacity was not. A real sampler over a ``file://`` folder, a real status.

And ``--interval`` past what the clock's sleep takes: ``status --watch --interval 1e300`` drew a
screen, then ended in a traceback ("OverflowError: timestamp out of range for platform time_t").
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from sampler_helpers import EPOCHFS

from epochfs.sidecar.store import Store

ENV = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
COUNT = 5


def _epochfs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EPOCHFS, *args], capture_output=True, text=True, timeout=120, env=ENV)


def test_status_names_the_object_limit_when_every_object_was_skipped_for_size(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(COUNT):
        (data / f"{i}.bin").write_bytes(os.urandom(2000))
    cache = tmp_path / "c7"
    r = _epochfs("sample", "--cache", str(cache), "--remote", data.as_uri(), "--capacity", "1000")
    assert r.returncode == 2 and "larger than the object limit 750 B" in r.stderr, r.stderr[-2000:]

    doc = json.loads(_epochfs("status", "--cache", str(cache), "--json").stdout)
    assert doc["skipped_total"] == COUNT and doc["catalog_objects"] == 0
    warning = doc["listing"]["warning"]
    assert "check --remote's prefix" not in warning, warning
    assert f"{COUNT} skipped, larger than the object limit 750 B" in warning, warning
    assert "--capacity" in warning, warning

    shown = _epochfs("status", "--cache", str(cache))
    assert shown.returncode == 0, shown.stderr
    [line] = [x for x in shown.stdout.splitlines() if x.startswith("listing:")]
    said = f"listing: complete; WARNING: 0 objects kept of {COUNT} under {data.as_uri()} "
    assert line.startswith(said), line
    assert "object limit 750 B" in line and "prefix" not in line, line


@pytest.mark.parametrize("more", [(), ("--json",)])
def test_an_interval_past_a_day_is_refused_in_one_line(tmp_path: Path, more: tuple[str, ...]) -> None:
    cache = tmp_path / "cache"
    Store(cache, create=True).close()
    r = _epochfs("status", "--cache", str(cache), "--watch", "--interval", "1e300", *more)
    assert r.returncode == 2, (r.stdout[-500:], r.stderr[-2000:])
    assert r.stderr.strip() == ("epochfs status: --interval: must be at most 86400 seconds (a day between "
                                "two readings), not 1e+300"), r.stderr[-2000:]
    assert r.stdout == ""
