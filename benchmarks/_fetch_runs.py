"""How each tool of the fetch benchmark (:mod:`.fetch`) is run and timed: ``epochfs sample``
(watched through its index until every object is admitted), ``s5cmd cp``, ``rclone copy`` and
``download-path`` (epochfs's download path alone in a fresh process, :mod:`._fetch_alone`),
``python-floor`` (the least a Python process does for a durable, checked fetch, :mod:`._fetch_floor`), one
process each; and the sampler's modules compiled before them (:func:`compile_epochfs`).
"""

from __future__ import annotations

import compileall
import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

from epochfs.benchmarks import harness

PROGRAM: dict[str, str] = {}
"""Each tool's program (epochfs's console script, s5cmd, rclone), found when the run starts."""


def verified_kinds(cache: Path) -> set[str]:
    """The kinds of check the sampler recorded for its samples."""
    db = sqlite3.connect(f"file:{cache / 'index.sqlite'}?mode=ro", uri=True, timeout=5)
    try:
        return {str(r[0]) for r in db.execute("SELECT DISTINCT verified FROM samples")}
    finally:
        db.close()


class IndexWatch:
    """Read-only polls of a cache index: catalog ready, samples admitted (one connection)."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self.db: sqlite3.Connection | None = None

    def _query(self, sql: str) -> object:
        if self.db is None:
            if not (self.cache / "index.sqlite").exists():
                return None
            self.db = sqlite3.connect(f"file:{self.cache / 'index.sqlite'}?mode=ro", uri=True, timeout=5)
        try:
            row = self.db.execute(sql).fetchone()
        except sqlite3.OperationalError:
            return None
        return None if row is None else row[0]

    def catalog_ready(self) -> bool:
        return self._query("SELECT value FROM meta WHERE name='catalog_objects'") is not None

    def samples(self) -> int:
        count = self._query("SELECT COUNT(*) FROM samples")
        return count if isinstance(count, int) else 0

    def close(self) -> None:
        if self.db is not None:
            self.db.close()


STEADY: dict[str, float] = {}
"""Seconds of the last epochfs run after its start-up (imports, client, listing)."""


STALLED = 120.0
"""Seconds without a sample admitted after which a sampler run is a failure (a run of this
benchmark must end: a sampler that cannot list, for one, would be waited for for ever)."""

SAMPLE_ARGS: list[str] = []
"""More arguments of ``epochfs sample`` (``--sample-args``)."""


def run_epochfs(endpoint: str, url: str, dest: Path, count: int, concurrency: int, *,
                src: Path | None = None) -> tuple[float, float]:
    """``src``: a source folder put first on ``PYTHONPATH`` (``--baseline-src``)."""
    env = {**harness.s3_env(), "EPOCHFS_PROGRESS_SECONDS": "3600"}
    if src is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(src), *filter(None, [env.get("PYTHONPATH")])])
    started = time.monotonic()
    proc = subprocess.Popen(
        [PROGRAM["epochfs"], "--log-level", "WARNING", "sample", "--remote", url, "--cache", str(dest),
         "--endpoint-url", endpoint, "--capacity", "1Ti", "--concurrency", str(concurrency), *SAMPLE_ARGS],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    watch = IndexWatch(dest)
    ready: float | None = None
    progress = (-1, started)  # (samples, when that count was first seen)
    try:
        while True:
            if ready is None and watch.catalog_ready():
                ready = time.monotonic()
            samples = watch.samples()
            if ready is not None and samples >= count:
                break
            if proc.poll() is not None:
                assert proc.stderr is not None
                raise RuntimeError(f"epochfs sample exited {proc.returncode}: {proc.stderr.read()!r}")
            if samples != progress[0]:
                progress = (samples, time.monotonic())
            elif time.monotonic() - progress[1] > STALLED:
                harness.stop(proc, timeout=60)
                assert proc.stderr is not None
                raise RuntimeError(f"epochfs sample admitted {samples} of {count} objects and none for "
                                   f"{STALLED:.0f}s: {proc.stderr.read()[-2000:]!r}")
            time.sleep(0.01)  # completion poll: 10 ms resolution on runs of seconds
        done = time.monotonic()
        STEADY["last"] = done - ready
        return started, done - started
    finally:
        watch.close()
        harness.stop(proc, timeout=60)


def run_s5cmd(endpoint: str, url: str, dest: Path, count: int, concurrency: int) -> tuple[float, float]:
    env = harness.s3_env()
    started = time.monotonic()
    subprocess.run([PROGRAM["s5cmd"], "--endpoint-url", endpoint, "cp", f"{url}/*", f"{dest}/"], env=env,
                   check=True, stdout=subprocess.DEVNULL)
    return started, time.monotonic() - started


def run_rclone(endpoint: str, url: str, dest: Path, count: int, concurrency: int) -> tuple[float, float]:
    env = {**harness.s3_env(), **harness.rclone_env("bench", endpoint)}
    src = "bench:" + url.removeprefix("s3://")
    started = time.monotonic()
    subprocess.run([PROGRAM["rclone"], "copy", src, str(dest), "--transfers", str(concurrency), "--checkers",
                    str(concurrency), "--config", "/dev/null"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return started, time.monotonic() - started


def compile_epochfs(src: Path | None = None) -> None:
    """Compile the epochfs package that ``epochfs sample`` imports (this one, or the one under
    ``src``) into its ``__pycache__`` folders, as pip does at install. compileall skips linked
    folders, and sidecar/, fuse/ and torchclient/ are links: each is compiled where it lies."""
    if src is None:
        import epochfs

        package = Path(epochfs.__path__[0])
    else:
        package = src / "epochfs"
    ok = compileall.compile_dir(str(package), maxlevels=0, quiet=1)
    for entry in sorted(package.iterdir()):
        if entry.is_dir() and entry.name != "__pycache__":
            ok = compileall.compile_dir(str(entry.resolve()), quiet=1) and ok
    if not ok:
        raise RuntimeError(f"compiling {package} failed")


def run_download_path(endpoint: str, url: str, dest: Path, count: int,
                      concurrency: int) -> tuple[float, float]:
    """:mod:`._fetch_alone` from its process start to its exit; its scratch store lies beside
    ``dest`` (the same file system, so its files move into ``dest``) and is removed after."""
    store = dest.with_name(dest.name + "-store")
    started = time.monotonic()
    try:
        subprocess.run([*harness.PYTHON, "-m", "epochfs.benchmarks._fetch_alone", "--url", url,
                        "--endpoint", endpoint, "--dest", str(dest), "--store", str(store),
                        "--concurrency", str(concurrency)], env=harness.s3_env(), check=True,
                       stdout=subprocess.DEVNULL)
        return started, time.monotonic() - started
    finally:
        shutil.rmtree(store, ignore_errors=True)


def run_python_floor(endpoint: str, url: str, dest: Path, count: int,
                     concurrency: int) -> tuple[float, float]:
    """:mod:`._fetch_floor` from its process start to its exit."""
    started = time.monotonic()
    subprocess.run([*harness.PYTHON, "-m", "epochfs.benchmarks._fetch_floor", "--url", url,
                    "--endpoint", endpoint, "--dest", str(dest), "--concurrency", str(concurrency)],
                   env=harness.s3_env(), check=True, stdout=subprocess.DEVNULL)
    return started, time.monotonic() - started


TOOLS = {"epochfs": run_epochfs, "s5cmd": run_s5cmd, "rclone": run_rclone, "download-path": run_download_path,
         "python-floor": run_python_floor}
NOT_PROGRAMS = {"epochfs-base", "download-path", "python-floor"}
"""Tools that are no program of their own to find on the PATH (both run this Python)."""
