"""``epochfs verify --cache DIR`` through the console script: every object against the md5
recorded at its admission; damaged ones reported, quarantined and counted; the sampler then
fetches them again into their place: the epochs that list them keep listing them (issue 20)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from common import wait_until
from integrity_helpers import damage, objects_of, sampling
from sampler_helpers import index_rows
from store_helpers import sid_of

from epochfs.sidecar.metrics import StoreCollector
from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.store import INDEX_NAME, Store, object_name

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))


def verify(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EPOCHFS, "verify", "--cache", str(cache), *args], capture_output=True,
                          text=True, timeout=120)


def filled(tmp_path: Path, count: int = 10) -> tuple[Path, dict[str, bytes], MemoryRemote]:
    objects = objects_of(count)
    remote = MemoryRemote(objects)
    cache = tmp_path / "cache"
    with sampling(cache, remote, "--scrub-rate", "0") as (store, _):
        wait_until(lambda: store.stats().samples == count, what="every object admitted")
        store.cut(0)
    return cache, objects, remote


def test_verify_finds_quarantines_and_counts_damaged_objects_then_the_sampler_fetches_them(
        tmp_path: Path) -> None:
    cache, objects, remote = filled(tmp_path)
    keys = sorted(objects)
    flipped, truncated = keys[2], keys[5]
    damage(cache / "objects" / object_name(sid_of(flipped)), "flip")
    damage(cache / "objects" / object_name(sid_of(truncated)), "truncate")

    proc = verify(cache, "--progress-seconds", "0.000001")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("index: ok; 10 objects") and "10 etag-md5" in lines[0]
    damaged = {line.split()[1].rstrip(":"): line for line in lines if line.startswith("DAMAGED ")}
    assert set(damaged) == {flipped, truncated}
    assert "md5 " in damaged[flipped] and "size 1976, recorded 2976" in damaged[truncated]
    assert lines[-1] == "2 damaged, 8 ok"
    assert "verify: 10/10 objects" in proc.stderr, "progress lines on stderr"

    quarantine = cache / "quarantine"
    assert sorted(p.name for p in quarantine.iterdir() if p.name != "quarantine.log") == sorted(
        [sid_of(flipped), sid_of(truncated)])
    notes = [json.loads(line) for line in (quarantine / "quarantine.log").read_text().splitlines()]
    assert {n["key"] for n in notes} == {flipped, truncated}
    with Store(cache) as store:
        stats = store.stats()
        assert (stats.samples, stats.corrupt_objects_total, stats.repairing) == (10, 2, 2)
        before = store.epoch_files(0)
        assert [e.samples for e in store.epochs()] == [10], "the epoch keeps listing them"
        assert {flipped, truncated} <= {f.path for f in before}
        exported = {s.name: s.value for family in StoreCollector(stats=store.stats).collect()
                    for s in family.samples}
        assert exported["epochfs_corrupt_objects_total"] == 2 and exported["epochfs_samples_repairing"] == 2

    assert verify(cache).returncode == 0, "nothing damaged left (those waiting for a repair: not checked)"
    with sampling(cache, remote, "--scrub-rate", "0") as (store, _):
        wait_until(lambda: store.stats().repairing == 0, what="both fetched again into their place")
    with Store(cache) as store:
        for key, body in objects.items():
            assert (store.objects_dir / object_name(sid_of(key))).read_bytes() == body
        assert store.epoch_files(0) == before, "epoch 0 is the same epoch: same files, same lines"
        assert store.stats().repaired_total == 2
    assert remote.opens[flipped] == 2 and remote.opens[truncated] == 2
    again = verify(cache, "--json")
    assert again.returncode == 0
    report = json.loads(again.stdout)
    assert (report["objects"], report["ok"], report["damaged"]) == (10, 10, [])


def test_verify_reports_and_counts_a_deleted_object_file_and_its_epoch_keeps_the_entry(
        tmp_path: Path) -> None:
    """An object file deleted behind the store's back is damaged like a corrupt one: a DAMAGED
    line ("missing", marked for a repair in place: nothing to quarantine), exit status 1,
    ``epochfs_corrupt_objects_total`` and ``epochfs_samples_repairing``; then the sampler fetches
    it again into its place and epoch 0 is the epoch it was cut as."""
    cache, objects, remote = filled(tmp_path, 6)
    gone = sorted(objects)[3]
    with Store(cache) as store:
        before = store.epoch_files(0)
    os.unlink(cache / "objects" / object_name(sid_of(gone)))
    proc = verify(cache)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"DAMAGED {gone}: missing; marked for a repair in place (its file was gone)" in proc.stdout
    assert proc.stdout.splitlines()[-1] == "1 damaged, 5 ok"
    assert not (cache / "quarantine" / sid_of(gone)).exists()
    with Store(cache) as store:
        stats = store.stats()
        assert (stats.samples, stats.corrupt_objects_total, stats.repairing) == (6, 1, 1)
        assert store.epoch_files(0) == before, "the epoch keeps the entry while it waits"
        exported = {s.name: s.value for family in StoreCollector(stats=store.stats).collect()
                    for s in family.samples}
        assert exported["epochfs_corrupt_objects_total"] == 1 and exported["epochfs_samples_repairing"] == 1
    with sampling(cache, remote, "--scrub-rate", "0") as (store, _):
        wait_until(lambda: store.stats().repairing == 0, what="fetched again into its place")
        assert store.epoch_files(0) == before and store.stats().repaired_total == 1
        assert (store.objects_dir / object_name(sid_of(gone))).read_bytes() == objects[gone]


def test_verify_json_and_report_only_change_nothing(tmp_path: Path) -> None:
    cache, objects, _ = filled(tmp_path, 4)
    key = sorted(objects)[1]
    path = cache / "objects" / object_name(sid_of(key))
    damage(path, "flip")
    proc = verify(cache, "--json", "--report-only")
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["index"] == "ok" and report["objects"] == 4 and report["ok"] == 3
    assert report["verified"] == {"etag-md5": 4}
    [entry] = report["damaged"]
    assert entry["key"] == key and entry["quarantined_to"] is None and entry["problem"].startswith("md5 ")
    assert path.exists() and not (cache / "quarantine").exists()
    assert int(str(index_rows(cache, "SELECT COUNT(*) FROM samples")[0][0])) == 4


def test_verify_reports_a_damaged_index(tmp_path: Path) -> None:
    cache, _, _ = filled(tmp_path, 30)
    index = cache / INDEX_NAME
    size = index.stat().st_size
    with open(index, "r+b") as f:
        f.seek((size // 4096 // 2) * 4096)
        f.write(os.urandom(4096))
    proc = verify(cache, "--json")
    assert proc.returncode in (1, 2), proc.stderr
    if proc.returncode == 1:
        assert json.loads(proc.stdout)["index"] != "ok"
    else:  # SQLite could not even open it: one line, no traceback
        assert "Traceback" not in proc.stderr and proc.stderr.startswith("epochfs verify: --cache:")
