"""Clash-skipped keys keep their catalog rows but are not counted as keys of the dataset.

A key that is also a folder of other keys (``data/dog/3.jpg`` beside ``data/dog/3.jpg/extra.jpg``)
cannot be shown as both a file and a folder: it is skipped. Its catalog row is kept (marked
:data:`~epochfs.sidecar.store.catalog.SKIPPED_CLASH`) so that a relist does not drop it as gone and
a cached sample of it can be repaired; but every count of the keys the sampler can show counted
those rows too: "22 new ... 22 in the catalog" for 20 keys shown, ``catalog_objects`` 22, the
listing's ``estimated_objects`` 22 and epoch 0's header listed 22, estimated 22 over 20 samples:
a complete listing looked 2 short (reviewer J2.3). Before such rows were kept, a clash never
reached the catalog, and the counts were 20. The real ``epochfs sample`` over S3 (moto): a file
system remote cannot hold a name that is both a file and a folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from common import S3Server, put_objects, wait_until
from sampler_helpers import SamplerProc, index_rows, running_sampler, s3_env

from epochfs.sidecar.store import Store
from epochfs.sidecar.store.catalog import SKIPPED_CLASH

KEYS = ([f"data/cat/{i}.jpg" for i in range(10)] + [f"data/dog/{i}.jpg" for i in range(10)]
        + ["data/dog/3.jpg/extra.jpg", "data/cat/5.jpg/x/y.jpg"])
EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
SHOWN = len(KEYS) - 2
"""data/dog/3.jpg and data/cat/5.jpg are files and folders: skipped; the two under them are shown."""


def _catalog_lines(sp: SamplerProc) -> list[str]:
    return [line for line in sp.log_text().splitlines() if "epochfs.catalog INFO catalog: " in line]


def _samples(cache: Path) -> int:
    with Store(cache) as store:
        return store.stats().samples


def _epochs(cache: Path) -> list[tuple[int, int, int | None, int | None]]:
    with Store(cache) as store:
        return [(e.epoch, e.samples, e.listed, e.estimated) for e in store.epochs()]


def test_clash_skipped_rows_are_left_out_of_every_count(s3: S3Server, tmp_path: Path) -> None:
    put_objects(s3, "bkt", {f"ds/{k}": os.urandom(500) for k in KEYS})
    cache = tmp_path / "cache"
    with running_sampler(cache, "s3://bkt/ds", "--endpoint-url", s3.endpoint, "--capacity", "10Mi",
                         "--scrub-rate", "0", env=s3_env(s3.endpoint)) as sp:
        wait_until(lambda: _catalog_lines(sp), timeout=60, what="the listing's report")
        wait_until(lambda: _samples(cache) == SHOWN, timeout=60, what="every shown key cached")
        env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
        cut = subprocess.run([EPOCHFS, "cut", "--cache", str(cache)], env=env, capture_output=True,
                             text=True, timeout=120)
        assert cut.returncode == 0, cut.stderr
        line = _catalog_lines(sp)[0]
        assert "2 file/folder name clash(es) skipped" in line, line
        assert f"{SHOWN} cataloged" in line and " new" not in line, line
        assert line.endswith(f"; {SHOWN} in the catalog"), line
        clash_rows = index_rows(cache, "SELECT COUNT(*) FROM catalog WHERE skipped=?", (SKIPPED_CLASH,))
        assert clash_rows == [(2,)], "the clash rows stay, for a relist and a repair"
        with Store(cache) as store:
            stats = store.stats()
        assert stats.catalog_objects == SHOWN
        assert stats.listing["complete"] and stats.listing["estimated_objects"] == SHOWN
        n, samples, listed, estimated = _epochs(cache)[0]
        assert (n, samples, listed, estimated) == (0, SHOWN, SHOWN, SHOWN)
