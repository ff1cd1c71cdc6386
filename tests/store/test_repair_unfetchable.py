"""A sample waiting for its repair whose key can no longer be fetched is marked lost.

The take-out keeps a damaged object file in place until its repair renames the right bytes over
it (issue 20: a reader never finds a listed file gone). When the repair's download fails for good
(the key skipped after a 404 or a refusal) or a relist drops the key, nothing would ever repair
it: :func:`~epochfs.sidecar.store.integrity.repairs_due` offers only keys the catalog still
fetches, and every finder passes over samples in ``repairs``. Without the sweep the damaged bytes
were served, with no error, until the sample was evicted.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pytest
from integrity_helpers import damage
from store_helpers import sid_of

from epochfs.sidecar.store import Admission, CatalogRow, Policy, Store, object_name
from epochfs.sidecar.store.integrity import objects_after


def _admit(store: Store, key: str, body: bytes) -> None:
    temp = store.tmp_dir / f"{sid_of(key)}.part"
    temp.write_bytes(body)
    md5 = hashlib.md5(body).hexdigest()
    store.admit([Admission(key, sid_of(key), len(body), f"md5:{md5}", md5, temp)])


@pytest.mark.parametrize("how", ["skipped", "relisted away"])
def test_a_damaged_sample_whose_key_cannot_be_fetched_again_is_lost_not_served(
        tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture) -> None:
    with Store(tmp_path / "cache", create=True) as store:
        store.configure(Policy(capacity=10**6, headroom=0.0))
        body = b"x" * 600
        for key in ("keep", "bad"):
            _admit(store, key, body)
        store.add_catalog([CatalogRow(k, sid_of(k), 600, "v1", 0) for k in ("keep", "bad")])
        assert store.cut(0) == 0
        before = store.epoch_files(0)
        path = store.objects_dir / object_name(sid_of("bad"))
        damage(path, "flip")
        obj = next(o for o in objects_after(store._ix, 0, 10) if o.key == "bad")
        store.take_out([(obj, "digest mismatch")], quarantine=False)
        assert path.exists(), "kept in place for its repair"
        assert [c.key for c in store.repairs_due()] == ["bad"]

        if how == "skipped":  # its download failed for good: the sampler skips the key
            store.mark_skipped("bad")
        else:  # a relist found the key gone from the remote
            with store._ix.write() as db:
                db.execute("DELETE FROM catalog WHERE key='bad'")
        caplog.set_level(logging.WARNING, logger="epochfs.store")
        assert store.repairs_due() == []
        stats = store.stats()
        assert (stats.repairing, stats.lost) == (1, 1), "counted lost (still repairing: its entry stays)"
        assert not path.exists(), "the damaged bytes are no longer served"
        assert store.epoch_files(0) == before, "epoch 0 keeps both entries"
        _, lost = store.lost_samples()
        assert lost is not None and [e.path for e in lost] == ["bad"]
        assert any("can no longer be fetched" in r.getMessage() and "'bad'" in r.getMessage()
                   for r in caplog.records)
        assert store.repairs_due() == [], "once"
