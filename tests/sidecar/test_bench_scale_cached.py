"""``benchmarks/scale_cached.py`` at a toy size (seconds): a seeded cache of 500 samples that the
store's own checks find consistent, the real sidecar restarted on it against the synthetic S3
endpoint, every measurement taken, and nothing left mounted or running. Its numbers mean nothing
here (docs/scale.md has the real ones); that each one is measured, and that the seeded cache is
what the sampler itself leaves, does."""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import sys
from pathlib import Path

import pytest
from bench_helpers import run_benchmark

from epochfs.fuse.mounting import mount_table

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not Path("/dev/fuse").exists(),
                       reason="needs root and /dev/fuse"),
]

CACHED = 500
"""Samples seeded, of twice as many keys in the remote: the restarted sidecar fetches every key not
seeded (a GET and an admission each, most of the run's CPU), so a few hundred make the toy size."""


def processes_naming(text: str) -> list[str]:
    """Command lines of running processes that mention ``text`` (the scratch folder)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline and int(pid) != os.getpid():
            found.append(cmdline)
    return found


def test_scale_cached_seeds_a_consistent_cache_and_measures_every_column(tmp_path: Path) -> None:
    out, table, work = tmp_path / "cached.json", tmp_path / "cached.md", tmp_path / "work"
    work.mkdir()
    (work / "mine.txt").write_text("a file of the user's, which --keep must not remove")
    done = run_benchmark(
        [sys.executable, "-P", "-m", "epochfs.benchmarks.scale_cached", "--cached", str(CACHED), "--verify",
         "--dir", str(work), "--keep", "--json", str(out), "--markdown", str(table)],
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not [m for m in mount_table() if m.mount_point.startswith(str(tmp_path))]
    assert processes_naming(str(work)) == []  # sidecar, its children and the endpoint all stopped

    [result] = json.loads(out.read_text())
    assert (result["cached"], result["keys"]) == (CACHED, 2 * CACHED)
    assert (result["classes"], result["size"]) == (100, 256)
    timings = ["restart_sample_s", "restart_epoch_s", "restart_ready_s", "python_start_s", "status_s",
               "cut_cli_s", "lookup_cut_s", "scandir_s"]
    assert all(math.isfinite(result[t]) and result[t] > 0 for t in timings), result
    assert math.isfinite(result["fuse_bytes_per_file"]) and result["lookup_cut_made"]
    # The fresh epoch holds every seeded sample (epoch 0's budget took them all) and what came since.
    assert result["scandir_files"] >= CACHED
    assert result["index_bytes"] > 0 and result["seeded_index_bytes"] > 0
    for process in ("supervisor", "sampler", "fuse"):
        assert result["rss_mb"][f"{process}@ready"] > 0 and result["rss_mb"][f"{process}@end"] > 0
    # The seeded catalog is complete: the sidecar listed nothing, and fetched (GETs) past the seeds.
    assert result["server"]["list_pages"] == 0 and result["server"]["errors"] == 0
    assert 0 < result["fetched"] <= result["server"]["gets"]
    # The store's own scrub: every seeded object and the index sound.
    assert result["verify"] == {"returncode": 0, "index": "ok", "objects": CACHED, "ok": CACHED, "damaged": 0}

    kept = work / "epochfs-scale-cached"  # --keep's own folder in --dir, nothing else of it touched
    assert sorted(p.name for p in work.iterdir()) == [kept.name, "mine.txt"]
    cache = kept / "500" / "cache"
    log = (kept / "500" / "sidecar.log").read_text()
    # The sampler's start found a clean stop (journal in place, nothing to repair) and a complete
    # catalog, as after its own run.
    assert "0 lost object(s) to fetch again, 0 orphan object(s) removed" in log
    assert "start-up check of every object file" not in log
    assert f"catalog of {2 * CACHED} keys complete" in log
    with sqlite3.connect(f"file:{cache / 'index.sqlite'}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT s.id, s.sid, s.key, s.path, s.size, s.checksum, s.version, s.digest, "
                          "s.verified, s.rank, c.rank, c.sid FROM samples s JOIN catalog c ON c.key = s.key "
                          "ORDER BY s.id").fetchall()
        seeded_epoch = db.execute("SELECT first_sample, max_sample, samples FROM epochs WHERE n=0").fetchone()
    seeded = [r for r in rows if r[0] <= CACHED]
    fetched = [r for r in rows if r[0] > CACHED]
    assert len(seeded) == CACHED and fetched
    assert seeded_epoch == (1, CACHED, CACHED)

    def shape(row: tuple[object, ...]) -> tuple[object, ...]:
        """What a row says about how it was admitted, beside its own values."""
        _, sid, key, path, size, checksum, version, digest, verified, rank, catalog_rank, catalog_sid = row
        return (path == key, sid == catalog_sid, rank == catalog_rank, size,
                checksum == digest == f"md5:{version}", verified)

    expected = {(True, True, True, 256, True, "etag-md5")}
    assert {shape(r) for r in seeded} == {shape(r) for r in fetched} == expected
    # Seeded in the sampling order: the seeds are the lowest ranks, the sampler went on after them.
    assert max(r[9] for r in seeded) < min(r[9] for r in fetched)
    # A seeded body is the endpoint's (the sampler fetched the same bucket: md5 = the ETag).
    sid, version = seeded[0][1], seeded[0][6]
    assert hashlib.md5((cache / "objects" / sid[:2] / sid).read_bytes()).hexdigest() == version

    lines = table.read_text().splitlines()
    assert lines[0].startswith("| cached | keys | restart: next sample (s) | restart: epoch-0 (s) |")
    assert lines[2].startswith("| 500 | 1k |")
    assert "| 500 | 1k |" in done.stdout
