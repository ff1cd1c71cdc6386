"""``epochfs verify``'s quarantine copy of a damaged object kept in place for its repair (issue 20).

The take-out keeps the damaged object file where it is until the sampler's repair renames the
right bytes over it; verify keeps a copy in ``quarantine/`` (a second link, a copy where links are
refused). The copy must be of the damaged bytes even when a running sampler's repair lands the
moment the take-out commits, a copy that fails (ENOSPC) must not end verify's report, and a sample
already waiting for its repair that another finder finds lost is reported and quarantined too.

Real Store, real files and SQLite; the quarantine volume that refuses links and fills up is a real
small tmpfs (tests/inprocess.py)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from inprocess import small_volume
from integrity_helpers import damage
from store_helpers import sid_of

from epochfs.sidecar.store import Admission, CatalogRow, Policy, Store, object_name
from epochfs.sidecar.store.records import StoredObject


def _download(store: Store, key: str, body: bytes) -> Admission:
    temp = store.temp_path()
    temp.write_bytes(body)
    md5 = hashlib.md5(body).hexdigest()
    return Admission(key, sid_of(key), len(body), f"md5:{md5}", md5, temp)


def _filled(store: Store, bodies: dict[str, bytes]) -> dict[str, StoredObject]:
    store.configure(Policy(capacity=10**8, headroom=0.0))
    store.admit([_download(store, k, b) for k, b in bodies.items()])
    store.add_catalog([CatalogRow(k, sid_of(k), len(b), md5_of(b), 0) for k, b in bodies.items()])
    assert store.cut(0) == 0
    return {o.key: o for o in store.stored_objects(after_id=0, limit=100)}


def md5_of(body: bytes) -> str:
    return hashlib.md5(body).hexdigest()


def _damaged(store: Store, obj: StoredObject) -> bytes:
    path = store.objects_dir / object_name(obj.sid)
    damage(path, "flip")
    return path.read_bytes()


def test_a_repair_landing_as_verify_commits_leaves_the_damaged_bytes_in_quarantine(tmp_path: Path) -> None:
    """A sampler's repair needs the take-out's ``repairs`` row committed before it can start; it
    lands right after that commit here. The quarantine link was taken after the commit: it linked
    the repaired (good) file, and quarantine.log recorded it as damaged."""
    good = b"g" * 5000
    with Store(tmp_path / "cache", create=True) as store:
        obj = _filled(store, {"a": good})["a"]
        bad = _damaged(store, obj)
        problem = store.check_object(obj)
        assert problem is not None

        ix = store._ix
        write = ix.write
        landed: list[bool] = []

        @contextlib.contextmanager
        def write_then_repair() -> Iterator[sqlite3.Connection]:
            with write() as db:
                yield db
            if not landed:  # the take-out's commit: the sampler's repair lands now
                landed.append(True)
                store.admit([_download(store, "a", good)])

        ix.write = write_then_repair  # type: ignore[method-assign]
        try:
            [taken] = store.take_out([(obj, problem)], quarantine=True)
        finally:
            ix.write = write  # type: ignore[method-assign]
        assert landed and store.stats().repairing == 0 and store.stats().repaired_total == 1
        path = store.objects_dir / object_name(obj.sid)
        assert path.read_bytes() == good, "the repair landed"
        assert taken.moved_to == tmp_path / "cache" / "quarantine" / obj.sid
        assert taken.moved_to.read_bytes() == bad, "the quarantine holds the damaged bytes"
        assert taken.moved_to.stat().st_ino != path.stat().st_ino


def test_a_quarantine_copy_that_fails_is_dropped_and_the_report_goes_on(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``quarantine/`` on another volume (links refused: EXDEV) that is nearly full: the copy of
    the big object fails with ENOSPC after the commit. It ended the take-out with that error,
    verify's report of the rest of the batch lost, and left ``.<sid>.<pid>.tmp`` behind."""
    bodies = {"big": b"B" * (3 << 20), "small": b"s" * 3000}
    cache = tmp_path / "cache"
    with Store(cache, create=True) as store:
        objs = _filled(store, bodies)
        bad = {k: _damaged(store, o) for k, o in objs.items()}
        found = [(objs[k], store.check_object(objs[k]) or "") for k in ("big", "small")]
        caplog.set_level(logging.WARNING, logger="epochfs.store")
        with small_volume(cache / "quarantine", "1m") as quarantine:
            taken = {t.key: t for t in store.take_out(found, quarantine=True)}
            assert set(taken) == {"big", "small"}, "both reported"
            assert taken["big"].moved_to is None, "no copy of the one that did not fit"
            assert taken["small"].moved_to == quarantine / sid_of("small")
            assert (quarantine / sid_of("small")).read_bytes() == bad["small"]
            left = sorted(p.name for p in quarantine.iterdir())
            assert left == sorted([sid_of("small"), "quarantine.log"]), "no temp left behind"
            notes = [json.loads(line) for line in (quarantine / "quarantine.log").read_text().splitlines()]
            assert [n["key"] for n in notes] == ["small"]
        warnings = [r.getMessage() for r in caplog.records if "no copy kept" in r.getMessage()]
        assert len(warnings) == 1 and "'big'" in warnings[0], warnings
        assert store.stats().repairing == 2, "both wait for their repair all the same"
        for k, o in objs.items():
            assert (store.objects_dir / object_name(o.sid)).read_bytes() == bad[k], "kept in place"


@pytest.mark.parametrize("first", ["scrub", "verify"])
def test_a_waiting_sample_found_lost_by_verify_is_reported_and_quarantined(
        tmp_path: Path, first: str) -> None:
    """A sample the first finder took out waits for its repair; its key then leaves the catalog,
    and verify finds the same damage: it is marked lost, and its kept file goes. It was unlinked
    (verify kept no copy) and left out of the take-out's answer, so verify's report omitted it."""
    cache = tmp_path / "cache"
    with Store(cache, create=True) as store:
        obj = _filled(store, {"a": b"a" * 3000})["a"]
        bad = _damaged(store, obj)
        problem = store.check_object(obj) or ""
        path = store.objects_dir / object_name(obj.sid)
        [first_taken] = store.take_out([(obj, problem)], quarantine=first == "verify")
        assert first_taken.refetch is not None and path.exists(), "kept for its repair"
        with store._ix.write() as db:  # a relist found the key gone from the remote
            db.execute("DELETE FROM catalog WHERE key='a'")

        [taken] = store.take_out([(obj, problem)], quarantine=True)
        assert (taken.key, taken.problem, taken.refetch) == ("a", problem, None)
        assert taken.moved_to == cache / "quarantine" / obj.sid and taken.moved_to.read_bytes() == bad
        assert not path.exists(), "its damaged bytes are not served"
        stats = store.stats()
        assert (stats.repairing, stats.lost, stats.corrupt_objects_total) == (1, 1, 1), "counted once"
        assert store.take_out([(obj, problem)], quarantine=True) == [], "once"


def test_a_waiting_sample_found_lost_by_the_scrub_is_reported_and_removed(tmp_path: Path) -> None:
    with Store(tmp_path / "cache", create=True) as store:
        obj = _filled(store, {"a": b"a" * 3000})["a"]
        _damaged(store, obj)
        problem = store.check_object(obj) or ""
        store.take_out([(obj, problem)], quarantine=False)
        with store._ix.write() as db:
            db.execute("DELETE FROM catalog WHERE key='a'")
        [taken] = store.take_out([(obj, problem)], quarantine=False)
        assert (taken.key, taken.moved_to, taken.refetch) == ("a", None, None)
        assert not (store.objects_dir / object_name(obj.sid)).exists()
        assert not (tmp_path / "cache" / "quarantine").exists()
