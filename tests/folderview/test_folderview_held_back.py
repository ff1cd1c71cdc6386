"""A published folder-view epoch never shows other bytes, even after the store gave up waiting for
its publisher (:mod:`epochfs.sidecar.store.heldback`).

An object's file is named by its key's hash alone, so a key evicted and fetched again lands on the
path the links of every epoch that showed it name. Once the publisher has been gone for
``GONE_AFTER`` seconds the store retires and evicts without it while the folder still shows the
retired epochs; a fetch of a key the remote rewrote meanwhile then showed the remote's new bytes
under a still-published epoch's name and manifest, with no error. The keys evicted then are held
back: their links dangle (the documented "missing files") until a publisher is back and has taken
the retired epochs' folders down; then they are fetched again.

Real parts: the sampler's loop in this process (``GONE_AFTER`` is shortened here, the one thing
a child process could not be given), a real ``file://`` remote rewritten on disk, and a real
``epochfs publish`` child killed with SIGKILL and started again.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from common import random_objects, wait_until
from folderview_helpers import write_remote
from inprocess import start_recording

from epochfs.sidecar import config
from epochfs.sidecar.catalog import build_catalog
from epochfs.sidecar.config import SamplerSettings
from epochfs.sidecar.keys import sample_id
from epochfs.sidecar.remote import open_remote
from epochfs.sidecar.sampler import Sampler
from epochfs.sidecar.store import Store, heldback, publisherlock
from epochfs.sidecar.store.objects import object_name
from epochfs.torchclient import layout

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))


def rows(cache: Path, sql: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(f"file:{cache / 'index.sqlite'}?mode=ro", uri=True, timeout=30)
    try:
        return db.execute(sql).fetchall()
    except sqlite3.OperationalError as e:
        if "no such table" in str(e):
            return []
        raise
    finally:
        db.close()


def held_back(cache: Path) -> set[str]:
    return {str(s) for (s,) in rows(cache, f"SELECT sid FROM {heldback.TABLE}")}


def unfetchable(cache: Path) -> int | None:
    """Catalog keys neither cached nor held back: what the sampler may still fetch (None: no key
    was ever held back)."""
    if not rows(cache, f"SELECT 1 FROM sqlite_master WHERE name='{heldback.TABLE}'"):
        return None
    return int(rows(cache, "SELECT COUNT(*) FROM catalog c WHERE c.skipped = 0 "
                           "AND NOT EXISTS (SELECT 1 FROM samples s WHERE s.key = c.key) "
                           f"AND NOT EXISTS (SELECT 1 FROM {heldback.TABLE} h WHERE h.sid = c.sid)")[0][0])


def retired(cache: Path) -> set[int]:
    return {int(n) for (n,) in rows(cache, "SELECT n FROM epochs WHERE retired != 0")}


def shown(folder: Path) -> dict[str, bytes]:
    """``epoch-N/<path>`` -> bytes of every file the folder shows now and can be read."""
    out: dict[str, bytes] = {}
    for n in layout.list_epochs(folder):
        manifest = layout.read_manifest(folder, n)
        for rel in manifest.paths if manifest is not None else []:
            try:
                out[f"epoch-{n}/{rel}"] = (folder / f"epoch-{n}" / rel).read_bytes()
            except OSError:
                continue  # dangling: a missing file is allowed
    return out


def other_bytes(folder: Path, recorded: dict[str, bytes]) -> list[str]:
    """Recorded files that read now as other bytes than they were published with."""
    bad = []
    for name, data in recorded.items():
        try:
            now = (folder / name).read_bytes()
        except OSError:
            continue
        if now != data:
            bad.append(name)
    return bad


@contextmanager
def publisher(cache: Path, folder: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "ab") as out:
        proc = subprocess.Popen([EPOCHFS, "--log-level", "DEBUG", "publish", "--cache", str(cache),
                                 "--mount", str(folder)], stdout=out, stderr=subprocess.STDOUT)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)


@pytest.mark.long
def test_keys_evicted_without_a_publisher_are_not_fetched_again_until_it_is_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(publisherlock, "GONE_AFTER", 2.0)
    caplog.set_level("INFO", logger="epochfs.store")
    remote = tmp_path / "remote"
    old = random_objects(48, 4096, seed=11)
    write_remote(remote, old)
    cache, folder = tmp_path / "cache", tmp_path / "view"
    # 16 samples of the 48 fit; a cut every 0.5 s, one epoch kept, 1 s in use: epochs retire and
    # their objects go all the time, and keys are evicted and fetched again pass after pass.
    settings = config.parse(SamplerSettings, [
        "--cache", str(cache), "--remote", f"file://{remote}", "--list-process", "0", "--capacity", "64Ki",
        "--concurrency", "2", "--cut-interval", "0.5", "--keep-epochs", "1", "--in-use-seconds", "1",
        "--retire-grace", "1", "--max-rate", "64Ki"], environ={})
    store = Store(cache, create=True)
    store.configure(settings.policy())
    build_catalog(store, open_remote(f"file://{remote}"), seed=settings.seed, shard_index=0, shard_count=1,
                  object_limit=settings.object_limit)
    stop = threading.Event()
    sampler = Sampler(store=store, remote=open_remote(f"file://{remote}"), settings=settings, stop=stop)
    thread, errors = start_recording(sampler.run)
    log = tmp_path / "publish.log"
    try:
        with publisher(cache, folder, log) as first:
            wait_until(lambda: publisherlock.state(cache) is True and len(layout.list_epochs(folder)) >= 2,
                       timeout=60, what="epochs published")
            first.kill()  # SIGKILL: the folder stays as it was, its retired epochs included
            first.wait()
        recorded = shown(folder)
        assert recorded, layout.list_epochs(folder)
        new = random_objects(48, 4096, seed=12)
        write_remote(remote, new)  # same keys and sizes, other bytes
        # The store gives up on the publisher, retires and evicts; a key evicted then must not be
        # fetched again: wait until nothing but held-back keys is left to fetch (or a shown file
        # changed, which ends the wait too).
        wait_until(lambda: other_bytes(folder, recorded)
                   or (unfetchable(cache) == 0 and len(shown(folder)) < len(recorded)),
                   timeout=90, what="every key cached or held back, some shown files gone")
        assert not other_bytes(folder, recorded), other_bytes(folder, recorded)[:5]
        held = held_back(cache)
        assert held and "has not run for" in caplog.text
        assert "holding back" in caplog.text
        # A publisher back: its recovery takes the retired epochs' folders down, then it takes
        # the lock; the holds go and the keys are fetched again, with the remote's new bytes.
        gone = retired(cache)
        assert set(layout.list_epochs(folder)) & gone  # shown, dangling in part, until then
        with publisher(cache, folder, log):
            wait_until(lambda: not held_back(cache), timeout=60, what="the holds released")
            assert "released" in caplog.text
            assert not set(layout.list_epochs(folder)) & gone
            refetched = {k for k in new if sample_id(k) in held}

            def fetched_again() -> list[str]:
                return [k for k in refetched
                        if (cache / "objects" / object_name(sample_id(k))).exists()]

            wait_until(fetched_again, timeout=60, what="a held-back key fetched again")
            key = fetched_again()[0]
            assert (cache / "objects" / object_name(sample_id(key))).read_bytes() == new[key]
    finally:
        stop.set()
        thread.join(timeout=30)
        store.close()
    assert not thread.is_alive() and not errors, errors

