"""``kill -9`` of the folder publisher at random moments while it publishes and retires epochs.

Each round starts ``epochfs publish`` for real over a store that a driver thread keeps changing
(a cut of a 1,500-entry epoch every 30 ms, retirements of all but the newest two), picks a
moment at random (during a build, whole or of the next epoch's tree built ahead; during a
retirement; a random delay after the tree built ahead appeared, which lands inside its growth or
the cut that shows it; 0-4 ms after a cut made while a tree built ahead was there, which lands
inside the publish the cut woke (the manifest written from the body kept ahead, the folders made
read-only, the rename) or just after it; or after a random delay) and kills the publisher with
SIGKILL there. Then,
on the folder exactly as the crash left it:

* no partial epoch is visible: every ``epoch-N/`` a reader can list is complete (its manifest is
  there, its entries are exactly the manifest's, each a link to the store's object);
* nothing a reader was promised is gone: every epoch listed just before the kill that the store
  still holds is still there, with the same folder;
* after recovery (what the next start does) no temporary name is left, and a step publishes every
  live epoch;
* kills landed while a tree built ahead was there (its temporary name seen), growing or being
  shown. (``shared`` counts the rounds where epochs sharing entries as hard links were visible at
  the kill; with cuts every 30 ms and two epochs kept that is rare, and
  ``test_folderview_ahead.py`` checks the sharing itself.)

The same in schedule mode (``schedule=True``): the store's epochs are windows of the sampling
order, the driver admits each next window's keys before it cuts, and the tree built ahead is
:mod:`epochfs.sidecar.folderview_window`'s.

Two rounds of each kind by default (in each mode); ``-m slow`` runs 40 rounds.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from fuse_helpers import EPOCHFS, open_store, sid_of

from epochfs.sidecar import folderview
from epochfs.sidecar.folderview import FolderPublisher
from epochfs.sidecar.store import Admission, CatalogRow, Policy, Schedule, Store
from epochfs.sidecar.store.listings import Part
from epochfs.torchclient import layout

ENTRIES = 1500
LINK_ROOT = Path("/efs")
"""Targets need not resolve here; a short root keeps them in the inode (fast on ext4)."""
MOMENTS = ("build", "retire", "ahead", "random", "cut")


def objects(start: int, count: int) -> dict[str, bytes]:
    return {f"d{i % 37:02d}/sub{i % 3}/f{i:06d}.bin": i.to_bytes(4, "big")
            for i in range(start, start + count)}


def admit(store: Store, items: dict[str, bytes]) -> None:
    """Admit test objects without the sampler's per-file fsync (3,000 of them would take seconds;
    this test is about the folder, not the cache's durability)."""
    admissions = []
    for key, body in items.items():
        temp = store.temp_path()
        temp.write_bytes(body)
        admissions.append(Admission(key, sid_of(key), len(body), "md5:" + hashlib.md5(body).hexdigest(), "v1",
                                    temp))
    store.admit(admissions)


CATALOG = 4 * ENTRIES
"""Schedule mode: the keys listed, in a shuffled sampling order; windows of ENTRIES keys growing
by 0.1% an epoch (capped by the catalog: then every cut has the same window)."""


def schedule_mode(store: Store) -> list[str]:
    """Make ``store`` a schedule-mode store with a complete catalog; the keys in sampling order."""
    store.configure(Policy(capacity=1 << 30, keep_epochs=2, in_use_seconds=1000.0,
                           schedule=Schedule(initial=ENTRIES, growth=1.001)))
    keys = sorted(objects(0, CATALOG))
    ranks = random.Random(5).sample(range(10 * CATALOG), CATALOG)
    rows = [CatalogRow(k, sid_of(k), 4, "v", rank=r) for k, r in zip(keys, ranks, strict=True)]
    listings = store.listings()
    part = Part(0, "", "", None, after="", done=True)
    gen = listings.begin([part], "test")
    listings.commit_page(gen, part, rows, skips=0, clashes=[])
    listings.finish(gen)
    return [r.key for r in sorted(rows, key=lambda r: (r.rank, r.key))]


class Driver(threading.Thread):
    """Cuts and retires epochs in the store while the publisher runs; in schedule mode (``order``:
    the keys in sampling order) it admits the next window's keys before each cut."""

    def __init__(self, store: Store, next_key: int, order: list[str] | None = None) -> None:
        super().__init__(daemon=True)
        self.store, self.next_key, self.rounds, self.order = store, next_key, 0, order
        self.stop = threading.Event()
        self.cuts = 0
        self.cut_made = threading.Condition()

    def run(self) -> None:
        while not self.stop.is_set():
            if self.order is not None:  # the next window's keys, up to its end
                hi = self.store.schedule_window(self.store.next_epoch())[1]
                if hi > self.next_key:
                    admit(self.store, {k: k.encode() for k in self.order[self.next_key:hi]})
                    self.next_key = hi
            elif self.rounds % 4 == 0:  # new samples now and then; epochs stay about ENTRIES large
                admit(self.store, objects(self.next_key, 5))
                self.next_key += 5
            self.rounds += 1
            if self.store.cut() is not None:
                with self.cut_made:
                    self.cuts += 1
                    self.cut_made.notify_all()
            self.store.retire(now=time.time() + 10_000)  # all but the newest two
            self.stop.wait(0.03)


def temp_names(folder: Path) -> list[str]:
    names = [n for n in os.listdir(folder) if n.startswith(folderview.TEMP_PREFIX)]
    control = folder / layout.CONTROL_DIR
    if control.is_dir():
        names += [n for n in os.listdir(control) if n.startswith(folderview.CONTROL_TEMP_PREFIX)]
    return names


def wait_for_moment(folder: Path, moment: str, rng: random.Random, proc: subprocess.Popen[bytes],
                    driver: Driver) -> str:
    """Return once the publisher is at ``moment`` (observed in the folder, or the driver's next cut),
    or after a random delay; what was seen."""
    if moment == "random":
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=rng.uniform(0.3, 1.5))  # a random moment (or the publisher's end)
        return "random"
    markers = tuple(folderview.TEMP_PREFIX + m for m in {
        "retire": ("retired-",), "build": ("epoch-", "ahead-"), "ahead": ("ahead-",),
        "cut": ("ahead-",)}[moment])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if any(n.startswith(markers) for n in os.listdir(folder)):
                if moment == "ahead":  # somewhere in its growth, or in the cut that shows it
                    time.sleep(rng.uniform(0.0, 0.06))
                if moment == "cut" and not cut_then_wait(driver, rng.uniform(0.0, 0.004)):
                    return "missed"
                return moment
        except FileNotFoundError:
            pass
        # A look every 0.2 ms, not a spin: a spin took a core from the publisher it watched (37 s
        # of the test's CPU), and a build or a retirement of 1,500 entries lasts milliseconds.
        time.sleep(0.0002)
    return "missed"


def cut_then_wait(driver: Driver, delay: float) -> bool:
    """Block until the driver's next cut, then wait ``delay`` seconds: inside the publish the cut
    woke (the publisher is woken by the cut, not by its poll). False when no cut came."""
    with driver.cut_made:
        seen = driver.cuts
        if not driver.cut_made.wait_for(lambda: driver.cuts > seen, timeout=20):
            return False
    time.sleep(delay)
    return True


def entries_of(base: Path) -> list[str]:
    """Relative paths of the entries under ``base``, sorted, without following them."""
    found = []
    for dirpath, _dirs, files in os.walk(base):
        rel = os.path.relpath(dirpath, base)
        found += [name if rel == "." else f"{rel}/{name}" for name in files]
    return sorted(found)


def check_visible_epochs_complete(folder: Path, store: Store) -> list[int]:
    """Every visible epoch is whole: its manifest, exactly its entries, links to its objects."""
    visible = layout.list_epochs(folder)
    live = {e.epoch for e in store.epochs()}
    for n in visible:
        manifest = layout.read_manifest(folder, n)
        assert manifest is not None, f"epoch-{n} visible without its manifest"
        walked = entries_of(folder / f"epoch-{n}")
        assert walked == manifest.paths, f"epoch-{n} differs from its manifest"
        if n in live:
            expected = {f.path: f"{LINK_ROOT}/{f.object_name}" for f in store.epoch_files(n)}
            assert sorted(expected) == manifest.paths, f"epoch-{n} is not the store's"
            for rel in manifest.paths[:: max(1, len(manifest.paths) // 50)]:
                assert os.readlink(folder / f"epoch-{n}" / rel) == expected[rel], rel
    latest = folder / layout.LATEST_NAME
    if os.path.lexists(latest):
        assert layout.parse_epoch_name(os.readlink(latest)) in visible, "latest points at nothing"
    return visible


def run_rounds(tmp_path: Path, rounds: int, seed: int, *, schedule: bool = False) -> dict[str, int]:
    rng = random.Random(seed)
    store = open_store(tmp_path / "cache", keep_epochs=2, in_use_seconds=1000.0)
    order = schedule_mode(store) if schedule else None
    admit(store, {k: k.encode() for k in order[:ENTRIES]} if order else objects(0, ENTRIES))
    assert store.cut(0) == 0
    folder = tmp_path / "view"
    next_key = ENTRIES
    seen = {m: 0 for m in (*MOMENTS, "missed", "shared")}
    argv = [*EPOCHFS, "--log-level", "WARNING", "publish", "--cache", str(store.root),
            "--mount", str(folder), "--link-root", str(LINK_ROOT)]
    for i in range(rounds):
        moment = MOMENTS[i % len(MOMENTS)]
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        driver = Driver(store, next_key, order)
        driver.start()
        try:
            got = wait_for_moment(folder, moment, rng, proc, driver)
            promised = layout.list_epochs(folder) if folder.is_dir() else []
            proc.kill()
        finally:
            driver.stop.set()
            driver.join()
            proc.wait()
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode() if proc.stderr else ""
        proc.stderr.close()  # type: ignore[union-attr]
        seen[got] += 1
        next_key = driver.next_key
        # The folder exactly as the crash left it.
        visible = check_visible_epochs_complete(folder, store)
        seen["shared"] += any(os.lstat(os.path.join(d, f[0])).st_nlink > 1 for n in visible
                              for d, _, f in os.walk(folder / f"epoch-{n}") if f)
        live = {e.epoch for e in store.epochs()}
        gone = [n for n in promised if n in live and n not in visible]
        assert not gone, f"round {i} ({got}): promised epochs {gone} are gone (visible {visible})"
        before = {n: os.stat(folder / f"epoch-{n}").st_ino for n in visible if n in live}
        # What the next start does: recover, then publish.
        publisher = FolderPublisher(store=store, folder=folder, link_root=LINK_ROOT)
        publisher.recover()
        assert temp_names(folder) == [], f"round {i} ({got}): leftovers after recovery"
        for n, ino in before.items():  # an epoch a reader may hold is never rebuilt
            assert os.stat(folder / f"epoch-{n}").st_ino == ino, f"round {i}: epoch-{n} replaced"
        publisher.step(force_status=True)
        assert layout.list_epochs(folder) == sorted(live), f"round {i}: not every live epoch published"
        check_visible_epochs_complete(folder, store)
    store.close()
    return seen


@pytest.mark.long
@pytest.mark.parametrize("schedule", [False, True], ids=["snapshot", "schedule"])
@pytest.mark.parametrize("seed", [int(os.environ.get("EPOCHFS_CRASH_SEED", "20261130"))])
def test_kill_9_while_publishing_and_retiring(tmp_path: Path, seed: int, schedule: bool) -> None:
    seen = run_rounds(tmp_path, rounds=6, seed=seed, schedule=schedule)
    print(f"seed {seed}: moments {seen}")
    assert seen["build"] + seen["retire"] + seen["ahead"] + seen["cut"] >= 3, seen  # most inside a build
    assert seen["ahead"] >= 1, seen  # a kill landed while a tree built ahead was there
    assert seen["cut"] >= 1, seen  # and one right after a cut shown from it


@pytest.mark.slow
@pytest.mark.parametrize("schedule", [False, True], ids=["snapshot", "schedule"])
def test_kill_9_while_publishing_and_retiring_many_rounds(tmp_path: Path, schedule: bool) -> None:
    seed = random.randrange(1 << 30)
    print(f"seed {seed} (EPOCHFS_CRASH_SEED={seed} repeats the default test's moments)")
    seen = run_rounds(tmp_path, rounds=40, seed=seed, schedule=schedule)
    print(f"moments {seen}")
    assert seen["build"] + seen["retire"] + seen["ahead"] + seen["cut"] >= 20, seen
    assert seen["ahead"] >= 5, seen
    assert seen["cut"] >= 5, seen
