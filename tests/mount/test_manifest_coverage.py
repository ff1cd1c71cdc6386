"""Each epoch records how much of the dataset the listing had seen when it was cut, and its
manifest's header says so (``listed=``, ``estimated=``), through a real mount: a user can tell an
early epoch (cut from the first keys listed) from a representative one (issue 19)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from fuse_helpers import admit, make_objects, mounted, open_store

from epochfs.sidecar.store import CatalogRow
from epochfs.sidecar.store.listings import Part
from epochfs.torchclient.layout import parse_manifest


def test_an_epoch_cut_while_listing_says_how_much_was_listed(tmp_path: Path) -> None:
    cache, mnt = tmp_path / "cache", tmp_path / "mnt"
    store = open_store(cache)
    objs = make_objects(6, 100, prefix="train/")
    listings = store.listings()
    gen = listings.begin([Part(0, "train/", "", None)], "list")
    rows = [CatalogRow(k, f"s{i}", len(v), "v", rank=i) for i, (k, v) in enumerate(sorted(objs.items()))]
    progress = {"listed": 6, "estimated": 600, "spans": 1, "spans_reached": 1, "first_round": True,
                "began": time.time()}
    listings.commit_page(gen, Part(0, "train/", "", None, after=rows[-1].key), rows, skips=0, clashes=[],
                         progress=json.dumps(progress))
    admit(store, objs)
    assert store.cut(0) == 0
    listings.finish(gen)
    assert store.cut(1, force=True) == 1
    assert [(e.listed, e.estimated) for e in store.epochs()] == [(6, 600), (6, 6)]
    assert [(e["listed"], e["estimated"]) for e in store.stats().epochs] == [(6, 600), (6, 6)]
    with mounted(cache, mnt) as m:
        for n, estimated in ((0, 600), (1, 6)):
            text = (m.path / ".epochfs" / f"epoch-{n}.manifest").read_text()
            assert text.split("\n")[0].endswith(f"\tlisted=6\testimated={estimated}")
            manifest = parse_manifest(text, source=f"epoch-{n}.manifest", epoch=n)
            assert (manifest.listed, manifest.estimated, len(manifest.paths)) == (6, estimated, 6)
