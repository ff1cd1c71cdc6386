"""A ``file://`` folder nested past 4,096 bytes is one skipped key; the rest of the dataset is sampled.

Walked by absolute paths, a folder whose path passed the kernel's PATH_MAX failed the whole listing
with ENAMETOOLONG, tried again for ever: nothing was cataloged, epoch 0 never came (review O,
defect 1). A key of 4,090 bytes, legal, could not be stat'ed under a root of 18 bytes, so it was
passed over as unreadable. Now the walk and the reads go relative to folder descriptors: the deep
folder is skipped and counted once under ``path over 4096 bytes``, the long key is cataloged and
read byte-exact, and epoch 0 holds every key the catalog takes.

The real ``epochfs sample`` on real folders (made with ``mkdirat``: ``mkdir`` refuses their paths).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from common import wait_until
from file_chain import make_chain
from sampler_helpers import index_rows, running_sampler, verify_cache

from epochfs.sidecar.store import Store


def _skipped_total(cache: Path) -> int:
    try:
        rows = index_rows(cache, "SELECT value FROM counters WHERE name='skipped_total'")
    except sqlite3.OperationalError:  # the index made, its tables not yet
        return 0
    return int(rows[0][0]) if rows else 0


def test_a_folder_past_4096_bytes_is_skipped_and_the_rest_sampled(tmp_path: Path) -> None:
    root = tmp_path / ("r" * 200) / "ds"  # some 300 bytes: under it 4,000 bytes pass PATH_MAX
    root.mkdir(parents=True)
    (root / "good").mkdir()
    (root / "good" / "a.bin").write_bytes(b"hello")
    # 17 folders of 250 bytes: 4,284 bytes below the root (a "D" chain sorts before "good").
    make_chain(root, [b"D" * 250] * 17, b"x.bin", b"x")
    # 4,090 bytes below a root of some 300: a legal key whose absolute path is over PATH_MAX.
    long_body = os.urandom(50_000)
    long_key = make_chain(root, [b"L" * 250] * 16, b"f" * 74, long_body)
    expected = {"good/a.bin": b"hello", long_key: long_body}
    cache = tmp_path / "cache"

    with running_sampler(cache, root.as_uri(), "--capacity", "1Mi") as sp:
        with Store(cache) as store:
            wait_until(lambda: store.stats().samples == len(expected) or not sp.alive(), timeout=60,
                       what="every key the catalog takes fetched")
            store.request_cut(0)  # as the FUSE view does on a lookup of epoch-0
            wait_until(lambda: store.epochs() or not sp.alive(), timeout=60, what="epoch 0 cut")
            assert sp.alive(), sp.log_text()[-3000:]
            epoch0 = {f.path for f in store.epoch_files(0)}
        skipped = _skipped_total(cache)
        text = sp.log_text()

    assert epoch0 == set(expected), text[-3000:]
    assert "listing failed" not in text and "ENAMETOOLONG" not in text, text[-3000:]
    assert index_rows(cache, "SELECT value FROM meta WHERE name='listing_complete'"), "listing complete"
    assert {str(k) for (k,) in index_rows(cache, "SELECT key FROM catalog")} == set(expected)
    assert skipped == 1
    said = [line for line in text.splitlines() if "path over 4096 bytes" in line]
    assert len(said) == 2, said  # the skip, once, and the listing's summary counting it
    assert "skipping key 'DDD" in said[0] and "catalog:" in said[1] and "path over 4096 bytes: 1" in said[1]
    assert verify_cache(cache, expected) == 2
