"""``epochfs status``: occupancy bar, epochs table and counters, from a cache or a mount."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from epochfs.sidecar.config import ConfigError, format_size
from epochfs.sidecar.store import Store

BAR_WIDTH = 40


def read_stats(*, cache: Path | None, mount: Path | None) -> dict[str, Any]:
    """The status document: from the mount's ``.epochfs/status.json`` or straight from the index."""
    if mount is not None:
        path = mount / ".epochfs" / "status.json"
        try:
            return dict(json.loads(path.read_text()))
        except FileNotFoundError:
            raise ConfigError(f"--mount: {mount} is not an epochfs mount (no {path.name})") from None
    assert cache is not None
    with Store(cache) as store:
        return store.stats().to_json()


def render(stats: dict[str, Any], rates: dict[str, float] | None = None) -> str:
    """Human view of a status document."""
    used = int(stats["cache_bytes"])
    inflight = int(stats.get("inflight_bytes", 0))
    cap = max(1, int(stats["capacity_bytes"]))
    filled = min(BAR_WIDTH, round(BAR_WIDTH * used / cap))
    pending = min(BAR_WIDTH - filled, round(BAR_WIDTH * inflight / cap))
    bar = "#" * filled + "+" * pending + "." * (BAR_WIDTH - filled - pending)
    lines = [
        f"cache [{bar}] {format_size(used)} / {format_size(cap)} ({100 * used / cap:.1f}%)"
        + (f", {format_size(inflight)} in flight" if inflight else ""),
        f"samples {stats['samples']}  fetched {stats['fetched_total']}  evicted {stats['evicted_total']}"
        f"  skipped {stats['skipped_total']}  catalog {stats.get('catalog_objects', 0)}"
        f"  mode {stats.get('mode', 'snapshot')}",
        "backpressure: " + ("YES (nothing evictable; sampling paused)" if stats["backpressure"] else "no"),
    ]
    if rates:
        lines.append("  ".join(f"{k} {v}" for k, v in rates.items()))
    pending_cuts = stats.get("pending_cuts") or []
    if pending_cuts:
        lines.append(f"pending cuts: {', '.join(str(n) for n in pending_cuts)}")
    lines.append(f"{'epoch':>6} {'samples':>9} {'new':>7} {'evicted':>8} {'bytes':>12}")
    for e in stats["epochs"]:
        lines.append(
            f"{e['epoch']:>6} {e['samples']:>9} {e.get('new', 0):>7} {e.get('evicted', 0):>8} "
            f"{format_size(e['bytes']):>12}"
        )
    if not stats["epochs"]:
        lines.append("  (no epoch cut yet)")
    return "\n".join(lines)


def run_status(
    *, cache: Path | None, mount: Path | None, as_json: bool, watch: bool, interval: float
) -> int:
    if not watch:
        stats = read_stats(cache=cache, mount=mount)
        if as_json:
            json.dump(stats, sys.stdout, indent=2, sort_keys=True)
            sys.stdout.write("\n")
        else:
            print(render(stats))
        return 0
    previous: tuple[float, dict[str, Any]] | None = None
    while True:
        stats = read_stats(cache=cache, mount=mount)
        now = time.monotonic()
        rates: dict[str, float] | None = None
        if previous is not None:
            dt = max(1e-6, now - previous[0])
            fetched = int(stats["fetched_bytes_total"]) - int(previous[1]["fetched_bytes_total"])
            rates = {"fetch MB/s": round(fetched / dt / 1e6, 1)}
        previous = (now, stats)
        sys.stdout.write("\x1b[H\x1b[2J" + render(stats, rates) + "\n")
        sys.stdout.flush()
        time.sleep(interval)
