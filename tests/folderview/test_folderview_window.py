"""Schedule mode's next epoch built ahead (issue 25), in-process on real folders and a real store.

As ``test_folderview_ahead.py`` does for snapshot mode: two publishers follow one schedule-mode
store, one building ahead, the other writing every epoch whole (the reference). After every cut
both folders hold byte-identical manifests and identical trees, and the ahead publisher showed the
epoch from the tree built ahead (``Step.ahead``), with the entries carried over from the window
before as hard links. Windows grow by the schedule and their front moves once they fill the epoch
budget; eviction runs; a sample of the next window lands only after the cut (a forced cut); a
sample is taken out. A relist that drops a key inside the next window (excluded rows) makes it
write that epoch whole, still identical.

Before the change every schedule-mode epoch was written whole (``Step.ahead`` empty).
"""

from __future__ import annotations

import hashlib
import os
import random
import time
from pathlib import Path

import pytest
from folderview_helpers import pair, same_epoch, settle, tree_of
from fuse_helpers import make_objects, open_store
from store_helpers import sid_of

from epochfs.sidecar import folderview_window
from epochfs.sidecar.folderview_window import WindowTree
from epochfs.sidecar.store import Admission, CatalogRow, Policy, Schedule, Store
from epochfs.sidecar.store.listings import Part


def admit(store: Store, items: dict[str, bytes]) -> None:
    """Admit test objects without the sampler's per-file fsync (this test is about the folder)."""
    admissions = []
    for key, body in items.items():
        temp = store.temp_path()
        temp.write_bytes(body)
        admissions.append(Admission(key, sid_of(key), len(body), "md5:" + hashlib.md5(body).hexdigest(),
                                    "v1", temp))
    store.admit(admissions)


def catalog(store: Store, rows: list[CatalogRow]) -> None:
    """A complete listing that finds exactly ``rows`` (a relist drops the keys not among them)."""
    listings = store.listings()
    part = Part(0, "", "", None, after="", done=True)
    gen = listings.begin([part], "test")
    listings.commit_page(gen, part, rows, skips=0, clashes=[])
    listings.finish(gen)


def schedule_store(tmp_path: Path, objects: dict[str, bytes]) -> tuple[Store, list[CatalogRow], list[str]]:
    """A schedule-mode store whose catalog is ``objects`` ranked in a shuffled order; the keys in
    sampling order. Windows of 40, 50, 62, 78, 98, 122, 153, 191, 238 keys, trimmed to 150 from
    epoch 6 on (the epoch budget: the front moves)."""
    store = open_store(tmp_path / "cache")
    store.configure(Policy(capacity=400 * 100, headroom=0.625, keep_epochs=2, in_use_seconds=0.0,
                           schedule=Schedule(initial=40, growth=1.25)))
    keys = sorted(objects)
    ranks = random.Random(7).sample(range(10 * len(keys)), len(keys))
    rows = [CatalogRow(k, sid_of(k), len(objects[k]), "v", rank=r) for k, r in zip(keys, ranks, strict=True)]
    catalog(store, rows)
    order = [r.key for r in sorted(rows, key=lambda r: (r.rank, r.key))]
    return store, rows, order


def test_schedule_windows_are_shown_from_the_tree_built_ahead_identical_to_a_whole_build(
        tmp_path: Path) -> None:
    objects = {**make_objects(150, 100, prefix="train/a/", seed=1),
               **make_objects(150, 100, prefix="train/b/deep/", seed=2)}
    store, _, order = schedule_store(tmp_path, objects)
    done = 0

    def fill(n: int, *, leave: int = 0) -> None:
        """Admit epoch n's window (in a shuffled order, as downloads complete), less ``leave``."""
        nonlocal done
        lo, hi = store.schedule_window(n)
        todo = order[max(lo, done):hi - leave]
        random.Random(n).shuffle(todo)
        admit(store, {k: objects[k] for k in todo})
        done = hi - leave

    fill(0)
    assert store.cut(0) == 0
    ahead, whole = pair(store, tmp_path)
    used: list[int] = []
    for n in range(1, 9):
        settle(ahead)
        hi = store.schedule_window(n)[1]
        half = done + (hi - done) // 2
        admit(store, {k: objects[k] for k in order[done:half]})
        done = half
        ahead.step()  # some land before the cut, seen ahead...
        if n == 3:  # a sample of the window taken out of the store (the scrub's quarantine)
            victim = next(o for o in store.stored_objects(after_id=30, limit=1))
            store.take_out([(victim, "test")], quarantine=False)
        fill(n, leave=1 if n == 5 else 0)  # ...and the rest only at the cut
        assert store.cut(n, force=n == 5) == n
        if n == 5:  # the window's last key lands after the cut: in the next epoch only
            fill(n)
        admit(store, {k: objects[k] for k in order[done:done + 2]})  # the next window's first
        done += 2
        step = ahead.step()
        whole.step()
        assert step.published == [n], step
        used += step.ahead
        same_epoch(ahead, whole, n)
        assert store.retire(now=time.time() + 10_000) or n < 2
        if n == 7:  # eviction takes what no live window pins (the front's samples)
            assert store.evict(1 << 30) > 0
    assert used == list(range(1, 9)), used  # every cut came from the tree built ahead
    assert store.schedule_window(8)[0] > store.schedule_window(7)[0] > 0  # and the front moved
    # Entries carried over are hard links of the epoch before's symlinks: one inode per entry.
    new, old = tree_of(ahead.folder / "epoch-8"), tree_of(ahead.folder / "epoch-7")
    shared = [rel for rel in new if not rel.endswith("/") and rel in old]
    assert len(shared) > 100
    for rel in shared:
        one, two = os.lstat(ahead.folder / "epoch-8" / rel), os.lstat(ahead.folder / "epoch-7" / rel)
        assert one.st_ino == two.st_ino and one.st_nlink >= 2, rel


def test_a_relist_in_the_window_excluded_keys_written_whole_moved_ends_still_ahead(tmp_path: Path) -> None:
    objects = make_objects(200, 10, prefix="d/", seed=3)
    store, rows, order = schedule_store(tmp_path, objects)
    admit(store, {k: objects[k] for k in order[:60]})
    assert store.cut(0) == 0
    ahead, whole = pair(store, tmp_path)
    settle(ahead)

    def cut(n: int, *, built_ahead: bool) -> None:
        assert store.cut(n) == n
        step = ahead.step()
        whole.step()
        assert step.published == [n] and step.ahead == ([n] if built_ahead else []), step
        same_epoch(ahead, whole, n)

    # A relist drops a cached key inside the windows' ends: its sample stays (epoch 0 lists it)
    # and the windows cut while it is held exclude it by a row, which the fast path does not
    # vouch for: written whole.
    catalog(store, [r for r in rows if r.key != order[20]])
    cut(1, built_ahead=False)
    admit(store, {k: objects[k] for k in order[60:80]})
    settle(ahead)
    cut(2, built_ahead=False)
    assert store.retire(now=time.time() + 10_000) == [0]
    # Eviction takes the dropped key's sample (no live epoch holds it now) and those past window
    # 2 (order[:63] less the dropped key), which are fetched again.
    assert store.evict(1 << 30) > 0
    # A relist after the tree was built ahead finds a key inside the next window: its ends move
    # (one key fewer at the end). The cut moves the set to the row's ends: still built ahead.
    admit(store, {k: objects[k] for k in order[63:100]})
    settle(ahead)
    rank = next(r.rank for r in rows if r.key == order[30])
    new = CatalogRow("d/new.bin", sid_of("d/new.bin"), 10, "v", rank=rank)
    catalog(store, [r for r in rows if r.key != order[20]] + [new])
    admit(store, {"d/new.bin": bytes(10)})
    cut(3, built_ahead=True)
    assert "d/new.bin" in (ahead.folder / ".epochfs/epoch-3.manifest").read_text()


def test_a_step_between_a_cut_and_its_publish_keeps_the_aim(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A step of the tree that lands after a cut and before the step that publishes it (the cut
    committed inside a step) leaves the set on the cut's window: before, it moved the aim to the
    window after (its catalog rows read: 4-8 s at a million keys) and the publish moved it back
    (a pass over every member), all in the trainer's wait (issue 25: 10.8 s at 1M)."""
    objects = make_objects(200, 10, prefix="d/", seed=4)
    store, _, order = schedule_store(tmp_path, objects)
    admit(store, {k: objects[k] for k in order[:40]})
    assert store.cut(0) == 0
    ahead, whole = pair(store, tmp_path)
    settle(ahead)
    monkeypatch.setattr(folderview_window, "AIM_SECONDS", 0.0)  # every step looks at the aim again
    tree = ahead._ahead.tree
    assert isinstance(tree, WindowTree) and tree.aimed == 1
    admit(store, {k: objects[k] for k in order[40:store.schedule_window(1)[1]]})
    assert store.cut(1) == 1
    tree.advance()  # the step in which the cut landed
    assert tree.aimed == 1
    step = ahead.step()
    whole.step()
    assert step.published == [1] and step.ahead == [1], step
    same_epoch(ahead, whole, 1)
    settle(ahead)  # after the publish the set follows the next window
    assert tree is ahead._ahead.tree and tree.aimed == 2
    admit(store, {k: objects[k] for k in order[50:store.schedule_window(2)[1]]})
    settle(ahead)
    assert store.cut(2) == 2
    step = ahead.step()
    whole.step()
    assert step.ahead == [2], step
    same_epoch(ahead, whole, 2)
