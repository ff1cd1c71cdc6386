"""Helpers for the sampler tests: run the real ``epochfs sample`` and check a cache byte by byte."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from common import wait_until
from digest_helpers import expected_record
from store_helpers import sample_checksums

from epochfs.sidecar.store import INDEX_NAME, Store

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))


@dataclass
class SamplerProc:
    """A running ``epochfs sample`` child with its log file."""

    proc: subprocess.Popen[bytes]
    log: Path
    cache: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Signal the sampler and wait for it; returns its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            tail = self.log_text()[-3000:]
            raise AssertionError(f"sampler did not stop on signal {sig}:\n{tail}") from None

    def stats(self) -> dict[str, object]:
        with Store(self.cache) as store:
            return store.stats().to_json()


def start_sampler(
    cache: Path, remote: str, *args: str, env: dict[str, str] | None = None, log: Path | None = None,
    cwd: Path | None = None,
) -> SamplerProc:
    """Start ``epochfs sample`` and wait until it has run recovery (or exited)."""
    log = log or cache.parent / f"{cache.name}-sampler.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    full_env["EPOCHFS_PROGRESS_SECONDS"] = "1"
    full_env.update(env or {})
    runs_before = log.read_text(errors="replace").count(" recovery: ") if log.exists() else 0
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [EPOCHFS, "sample", "--remote", remote, "--cache", str(cache), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=full_env,
            cwd=cwd,
        )
    sp = SamplerProc(proc, log, cache)
    # Recovery is logged once signal handlers are in place and the index exists.
    wait_until(
        lambda: sp.log_text().count(" recovery: ") > runs_before or proc.poll() is not None,
        what="sampler start (recovery logged)",
    )
    if proc.poll() is not None:
        raise AssertionError(f"sampler exited {proc.returncode}:\n{sp.log_text()[-3000:]}")
    return sp


@contextlib.contextmanager
def running_sampler(cache: Path, remote: str, *args: str, env: dict[str, str] | None = None,
                    cwd: Path | None = None) -> Iterator[SamplerProc]:
    """A sampler for the duration of a block; it must stop cleanly (exit 0) at the end."""
    sp = start_sampler(cache, remote, *args, env=env, cwd=cwd)
    try:
        yield sp
    finally:
        rc = sp.stop()
    assert rc == 0, f"sampler exited {rc}:\n{sp.log_text()[-3000:]}"


def s3_env(endpoint: str) -> dict[str, str]:
    return {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }


def index_rows(cache: Path, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """A read-only query of the index (what the tests observe; the store API is the writer's)."""
    db = sqlite3.connect(f"file:{cache / INDEX_NAME}?mode=ro", uri=True, timeout=30)
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def verify_cache(cache: Path, source: dict[str, bytes] | None = None) -> int:
    """Check a stopped cache: integrity, no temp files, every sample's bytes and checksum.

    With ``source`` (key -> bytes), each sample must equal the remote object. Returns the number
    of samples checked.
    """
    assert index_rows(cache, "PRAGMA integrity_check") == [("ok",)]
    leftovers = sorted(p.name for p in (cache / "tmp").iterdir())
    assert leftovers == [], f"temp files left: {leftovers}"
    count = 0
    with Store(cache) as store:
        digests = {str(k): (str(d), str(v)) for k, d, v in
                   index_rows(cache, "SELECT key, digest, verified FROM samples")}
        for key, checksum, path in sample_checksums(store):
            data = path.read_bytes()
            digest, vouched = expected_record(digests[key][0], data)
            assert digests[key][0] == digest, f"{key}: digest mismatch"
            # Only a checksum the remote vouched for is recorded; a size-only sample says so.
            expected = "size-only" if digests[key][1] == "size-only" else vouched
            assert checksum == expected, f"{key}: checksum {checksum!r}, verified {digests[key][1]}"
            if source is not None:
                assert key in source, f"{key}: not a remote object"
                assert data == source[key], f"{key}: bytes differ from the remote"
            count += 1
        for info in store.epochs():
            for entry in store.epoch_files(info.epoch):
                obj = store.objects_dir / entry.object_name
                assert obj.stat().st_size == entry.size, f"epoch {info.epoch}: {entry.path} size"
    known = {str(r[0]) for r in index_rows(cache, "SELECT sid FROM samples")}
    on_disk = {p.name for p in (cache / "objects").glob("*/*")}
    assert on_disk == known, "object files and index rows differ"
    return count


def disk_bytes(cache: Path) -> int:
    """Bytes of object and temp files on disk at one moment: the end of a walk of their folders.

    A walk is not a snapshot. While it runs, a sampler evicts an object the walk has counted and
    downloads another into the room, into a folder the walk reaches later: counting as it walks
    counted both, more than the disk ever held at once. So the walk only lists names, and each
    file is sized after the walk: one still there existed both when listed (before the walk's
    end) and when sized (after it), so the files counted were all on disk together at the walk's
    end. Objects are listed before temp files, so a file renamed from temp into objects meanwhile
    is missed, never counted twice; a temp file sized later is at most the room its download
    reserved."""
    names: list[str] = []
    for folder in ("objects", "tmp"):
        for root, _dirs, files in os.walk(cache / folder):
            names += [os.path.join(root, name) for name in files]
    total = 0
    for path in names:
        with contextlib.suppress(FileNotFoundError):  # evicted, or renamed into objects, since
            total += os.stat(path).st_size
    return total
