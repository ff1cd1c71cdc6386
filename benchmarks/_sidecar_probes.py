"""Looking at a running sidecar from outside, as a benchmark does: its processes' RSS, its index
(read-only, no lock taken), its health endpoint, its mount, and the time a command of its CLI takes.

Shared by :mod:`epochfs.benchmarks.scale` and :mod:`epochfs.benchmarks.scale_cached` (and the
health reads by :mod:`epochfs.benchmarks.fairness`); apart from them because these probes measure
nothing themselves and neither benchmark's runs or tables are the other's concern.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from epochfs.benchmarks import harness


def rss_mb(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


class Index:
    """Read-only polls of the cache index (no lock taken, the sidecar is never waited on)."""

    def __init__(self, cache: Path) -> None:
        self.path = cache / "index.sqlite"
        self.db: sqlite3.Connection | None = None

    def newest_sample(self) -> int:
        """The highest admission id (0 for none yet): a new admission raises it, eviction does not."""
        try:
            if self.db is None:
                if not self.path.exists():
                    return 0
                self.db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=5)
            row = self.db.execute("SELECT max(id), count(*) FROM samples").fetchone()
            return int(row[0] or 0)
        except sqlite3.Error:
            self.close()
            return 0

    def count(self) -> int:
        try:
            with contextlib.closing(sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=5)) as db:
                return int(db.execute("SELECT count(*) FROM samples").fetchone()[0])
        except sqlite3.Error:
            return 0

    def close(self) -> None:
        if self.db is not None:
            self.db.close()
            self.db = None


def get_json(url: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return dict(json.load(r))
    except urllib.error.HTTPError as e:
        return dict(json.loads(e.read() or b"{}"))
    except (OSError, ValueError):
        return {}


def ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return int(r.status) == 200
    except OSError:
        return False


def pids(port: int, supervisor: int) -> dict[str, int | None]:
    children = get_json(f"http://127.0.0.1:{port}/healthz").get("children", {})
    return {"supervisor": supervisor, **{name: c.get("pid") if c.get("alive") else None
                                         for name, c in children.items()}}


def exists(path: Path) -> bool:
    try:
        os.stat(path)
        return True
    except OSError:
        return False


def walk(folder: Path) -> int:
    """Files below ``folder`` through ``scandir`` (what a Dataset's directory walk does)."""
    count = 0
    stack = [str(folder)]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                else:
                    count += 1
    return count


def timed_run(cmd: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        harness.fail(f"{' '.join(cmd[-3:])} exited {done.returncode}: {done.stderr[-2000:]}")
    return elapsed
