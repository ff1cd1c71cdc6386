"""The torch client through pauses and FUSE server restarts (issue 11, item 4), on real mounts.

* A loader paused mid-epoch (a checkpoint, a validation pass) while newer epochs are cut and the
  sampler retires what is unpinned: the training process holds the epoch's folder open, the
  server renews its pin, and the rest of the epoch reads byte for byte. A 2 s in-use window makes
  the renewals show in seconds; the mechanism does not depend on the window's length.
* kill -9 of the FUSE server, twice, under the real sidecar (moto as the remote) while a
  DataLoader with two workers reads epoch after epoch: no exception, every byte equal to the
  remote's, and the retries that rode out the missing mount said so in a log line.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from common import S3Server, put_objects, random_objects, wait_until
from fuse_helpers import admit, make_objects, mounted, open_store
from sidecar_helpers import running_sidecar

from epochfs.fuse.mounting import find_mount
from epochfs.torchclient import EpochLoader

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
]


def path_md5(path: str) -> tuple[str, str]:
    """Decoder: the file's path and the md5 of its bytes as the worker read them."""
    with open(path, "rb") as f:
        return path, "md5:" + hashlib.md5(f.read()).hexdigest()


def keep_list(batch: list) -> list:
    return batch


def last_read(cache: Path, n: int) -> float:
    db = sqlite3.connect(f"file:{cache / 'index.sqlite'}?mode=ro", uri=True)
    try:
        row = db.execute("SELECT last_read FROM epochs WHERE n=?", (n,)).fetchone()
        return float(row[0]) if row else 0.0
    finally:
        db.close()


@pytest.mark.long
def test_a_loader_paused_mid_epoch_keeps_its_epoch_whole(tmp_path: Path) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    window = 2.0
    store = open_store(cache, keep_epochs=1, in_use_seconds=window)
    objects = make_objects(60, 3000, seed=8)
    admit(store, objects)
    store.cut(0)
    expected = {k: "md5:" + hashlib.md5(v).hexdigest() for k, v in objects.items()}
    with mounted(cache, mnt):
        loader = EpochLoader(mnt, batch_size=2, num_workers=2, decode=path_md5, collate_fn=keep_list,
                             progress=None, report=False, prefetch_factor=1)
        try:
            run = loader.epoch(0)
            batches = iter(run)
            got = [item for _ in range(3) for item in next(batches)]
            assert run.dataset is not None and run.dataset.held
            wait_until(lambda: last_read(cache, 0) > 0, timeout=10, what="the reads of epoch 0 recorded")
            # The pause: newer epochs are cut and retirement runs, long past the window.
            start = time.time()
            for n in (1, 2, 3):
                admit(store, make_objects(1, 3000, start=500 + n, seed=n))
                assert store.cut(n) == n
                assert 0 not in store.retire()
            wait_until(lambda: last_read(cache, 0) > start + 3 * window, timeout=30,
                       what="epoch 0's pin renewed past three windows while the loader pauses")
            assert 0 not in store.retire()
            got += [item for batch in batches for item in batch]
            assert not run.dataset.held  # released at the end of the epoch
        finally:
            loader.close()
        seen = {os.path.relpath(path, mnt / "epoch-0"): md5 for path, md5 in got}
        assert len(got) == len(objects) and seen == expected
        # Released: the epoch retires once the window has passed.
        wait_until(lambda: 0 in store.retire(), timeout=30, what="epoch 0 retired after the epoch ended")
    store.close()


READER = r"""
import hashlib, json, logging, os, sys, time
from pathlib import Path
from epochfs.torchclient import EpochLoader

def path_md5(path):
    with open(path, "rb") as f:
        return path, "md5:" + hashlib.md5(f.read()).hexdigest()

def keep_list(batch):
    return batch

root, control = Path(sys.argv[1]), Path(sys.argv[2])
expected = json.loads(Path(sys.argv[3]).read_text())
logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
loader = EpochLoader(root, batch_size=4, num_workers=2, decode=path_md5, collate_fn=keep_list,
                     progress=None, report=False, timeout=120)
passes = 0
while not (control / "stop").exists():
    epoch = passes // 3  # a new epoch every third pass: cuts on lookup go on across restarts
    seen, bad = {}, []
    for number, batch in enumerate(loader.epoch(epoch)):
        for path, md5 in batch:
            rel = os.path.relpath(path, root / f"epoch-{epoch}")
            seen[rel] = seen.get(rel, 0) + 1
            if expected.get(rel) != md5:
                bad.append(rel)
        if number == 10 and (control / "pause").exists():
            # A pause mid-epoch (a checkpoint), during which the test restarts the FUSE server;
            # the workers' next reads come after it, while the mount is away.
            (control / "pause").unlink()
            print(json.dumps({"paused": passes}), flush=True)
            while not (control / "go").exists():
                time.sleep(0.01)
            (control / "go").unlink()
    passes += 1
    print(json.dumps({"pass": passes, "epoch": epoch, "files": len(seen), "reads": sum(seen.values()),
                      "bad": bad}), flush=True)
loader.close()
"""


ROUNDS = 2
"""FUSE server kills under one reading DataLoader (each costs a restart's backoff, seconds)."""


@pytest.mark.long
def test_kill_9_of_the_fuse_server_under_a_reading_dataloader(s3: S3Server, tmp_path: Path) -> None:
    """Twice: the reader pauses mid-epoch, the FUSE server is killed, the test waits until the
    supervisor has detached the dead mount (so the mount point is an empty folder for at least the
    restart's backoff), and the reader goes on: its workers' next reads find no mount and are
    retried until the new server answers."""
    # 30 batches a pass: the pause after batch 11 (44 samples read, 16 prefetched) leaves the
    # workers half a pass to read while the mount is away and after it is back.
    objects = random_objects(120, 2000, seed=3)
    put_objects(s3, "restart", objects)
    expected = {k: "md5:" + hashlib.md5(v).hexdigest() for k, v in objects.items()}
    (tmp_path / "expected.json").write_text(json.dumps(expected))
    control = tmp_path / "control"
    control.mkdir()
    extra = ("--capacity", "16Mi", "--min-samples", str(len(objects)))
    with running_sidecar(tmp_path, remote="s3://restart", endpoint=s3.endpoint, extra=extra) as car:
        err_path = tmp_path / "reader.err"
        with open(err_path, "w") as err:
            reader = subprocess.Popen(
                [sys.executable, "-c", READER, str(car.mount), str(control), str(tmp_path / "expected.json")],
                stdout=subprocess.PIPE, stderr=err, text=True)
        lines: queue.Queue[str] = queue.Queue()
        pump = threading.Thread(target=lambda: [lines.put(x) for x in reader.stdout or []], daemon=True)
        pump.start()
        reports: list[dict] = []

        def next_line() -> dict:
            try:
                line = lines.get(timeout=120)
            except queue.Empty:
                raise AssertionError(f"reader silent; its stderr:\n{err_path.read_text()[-5000:]}") from None
            doc = json.loads(line)
            if "pass" in doc:
                reports.append(doc)
            return doc

        try:
            while not reports:
                next_line()
            for _ in range(ROUNDS):
                (control / "pause").touch()
                while "paused" not in next_line():
                    pass
                old = car.child_pid("fuse")
                assert old is not None
                os.kill(old, signal.SIGKILL)
                wait_until(lambda: find_mount(car.mount) is None, timeout=30,
                           what="the supervisor to detach the dead mount")
                (control / "go").touch()

                def back(old: int = old) -> bool:
                    pid = car.child_pid("fuse")
                    return pid not in (None, old) and car.get("/readyz")[0] == 200

                wait_until(back, timeout=30, what="the mount back after kill -9 of the FUSE server")
                after = len(reports)
                while len(reports) < after + 2:  # the paused pass and one whole pass after it
                    next_line()
            (control / "stop").touch()
            assert reader.wait(timeout=120) == 0, err_path.read_text()[-5000:]
        finally:
            if reader.poll() is None:
                reader.kill()
                reader.wait()
        pump.join(timeout=10)
        while not lines.empty():
            doc = json.loads(lines.get())
            if "pass" in doc:
                reports.append(doc)
        log = err_path.read_text()
        assert "Traceback" not in log and "giving up" not in log, log[-5000:]
        assert all(r["bad"] == [] for r in reports), reports
        assert all(r["files"] == r["reads"] == len(objects) for r in reports), reports
        retried = [line for line in log.splitlines() if "the mount was away" in line]
        samples = [line for line in retried if ": sample " in line]
        print(f"{len(reports)} passes, {len(retried)} retry incidents ({len(samples)} in workers' sample "
              f"reads); e.g. {samples[:1]}")
        assert samples, f"no sample read met the missing mount in {ROUNDS} restarts?\n{log[-3000:]}"
        assert car.metric("epochfs_child_restarts_total", child="fuse") == ROUNDS
