"""Repairs counted before an index rebuild are counted once after it (soak S53).

The 600 s soak failed with ``repaired_total`` 54 for 33 repairs in the log (21 before its index
damage, 12 after): the damaged index's counts looked counted twice. The store is not where it
happened: the rebuild carries the damaged index's counters (sidecar/store/countercarry.py), the
repair marks of ``repairs.log`` that the rebuild applies again count nothing, and each later find
and repair counts once. This test holds the store to that, with the soak's order of events: repairs
in place before the damage, one sample still waiting for its repair at the damage, garbage over
pages of the index, the rebuild the sampler runs at its next start, then the waiting repair and a
new damage found and repaired after it. (The soak's own accounting added the carried counts back a
second time, as if the rebuilt index had counted from 0; see tests/sidecar/test_soak.py,
``counters_lost``.)

Real SQLite files with real damage, the real take-out, repair and rebuild.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from integrity_helpers import damage
from store_helpers import garble, restart_as_the_sampler, sid_of

from epochfs.sidecar.store import INDEX_NAME, Admission, CatalogRow, Policy, Store, object_name, repairlog
from epochfs.sidecar.store.integrity import objects_after

KEYS = [f"train/{i:05d}.bin" for i in range(200)]  # enough rows for several leaf pages of samples
BODY = {k: hashlib.sha256(k.encode()).digest() * 22 for k in KEYS}  # 704 bytes each
CATALOG = [CatalogRow(k, sid_of(k), len(BODY[k]), "v1", i) for i, k in enumerate(KEYS)]


def _admit(store: Store, key: str) -> None:
    """The remote's bytes of ``key`` admitted as the sampler does: a repair in place when the
    sample waits for one."""
    temp = store.tmp_dir / f"{sid_of(key)}.part"
    temp.write_bytes(BODY[key])
    md5 = hashlib.md5(BODY[key]).hexdigest()
    store.admit([Admission(key, sid_of(key), len(BODY[key]), f"md5:{md5}", md5, temp)])


def _find(store: Store, keys: list[str]) -> None:
    """Damage the object files of ``keys`` and take them out as a scrub that found them does."""
    for k in keys:
        damage(store.objects_dir / object_name(sid_of(k)), "flip")
    found = [o for o in objects_after(store._ix, 0, len(KEYS) + 1) if o.key in keys]
    assert sorted(o.key for o in found) == sorted(keys)
    store.take_out([(o, "md5 mismatch") for o in found], quarantine=False)


def _counts(store: Store) -> tuple[int, int, int]:
    stats = store.stats()
    return stats.corrupt_objects_total, stats.repaired_total, stats.repairing


def test_repairs_before_a_rebuild_count_once_with_those_after_it(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with Store(cache, create=True) as store:
        store.recover()
        store.configure(Policy(capacity=10**7, headroom=0.0))
        for k in KEYS:
            _admit(store, k)
        store.add_catalog(CATALOG)
        assert store.cut(0) == 0
        _find(store, KEYS[10:13])
        for k in KEYS[10:13]:
            _admit(store, k)  # repaired in place
        _find(store, [KEYS[50]])  # still waiting for its repair at the damage
        assert _counts(store) == (4, 3, 1)
        marks = repairlog.load(cache)
        assert [m.sid for m in marks.values()] == [sid_of(KEYS[50])], "its mark, for the rebuild"
    garble(cache, "samples", pages=2)  # not the counters' page: they can be read and carried

    problem, _, _ = restart_as_the_sampler(cache)
    assert problem != "ok"
    assert list(cache.glob(f"{INDEX_NAME}.corrupt-*")), "the damaged index was replaced"
    with Store(cache) as store:
        assert _counts(store) == (4, 3, 1), "carried once; the waiting mark applied again counts nothing"
        store.add_catalog(CATALOG)  # the sampler lists the remote again
        assert [c.key for c in store.repairs_due()] == [KEYS[50]]
        _admit(store, KEYS[50])  # its repair, after the rebuild
        _find(store, [KEYS[120]])  # a new damage after the rebuild, found and repaired
        _admit(store, KEYS[120])
        assert _counts(store) == (5, 5, 0), "5 found and 5 repaired in all, each counted once"
    with Store(cache) as store:  # and so after the next start's recovery (repairs.log rewritten)
        store.recover()
        assert _counts(store) == (5, 5, 0)
