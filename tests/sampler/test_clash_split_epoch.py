"""The epoch a sampler cuts holds what a reader is shown, however the listing cut the bucket, and
a relist logs only the skipped keys it did not skip before.

A file ``one/k`` beside ``one/k/x``, 1,000 keys ``one/k-NNNN`` between them: the listing splits
that folder between the two and must still skip ``one/k`` as a clash, or the sampler fetches it,
counts it in the epoch's size, and the view hides it (a trainer comparing ``len(dataset)`` with
the epoch's size sees one more). ``m`` beside a folder marker ``m/`` and ``w`` beside the unsafe
``w/../v`` clash with nothing (no folder is shown), and the bucket has files at its top: ``m/`` and
``w/`` start spans of the listing, and both files are kept, as in a small bucket
(tests/listing/test_clash_across_stretches.py). Relists skip the same keys: each is logged once,
a key refused only since is logged at the relist that finds it, and ``skipped_total`` counts each
once. The real ``epochfs sample``, ``cut`` and ``relist`` over S3 (moto); the view's tree
(:class:`~epochfs.fuse.tree.EpochTree`, what the mount and the folder view show) is the reader.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from common import S3Server, wait_until
from sampler_helpers import SamplerProc, index_rows, running_sampler, s3_env

from epochfs.fuse.tree import EpochTree
from epochfs.sidecar.store import Store, object_name

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
ENV = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
KEYS = {"m": b"file m", "m/": b"", "w": b"file w", "w/../v": b"refused", "good/x": b"good",
        "one/k": b"file k", "one/k/x": b"below k", "one/zz": b"file zz", "one/zz/y": b"below zz",
        **{f"one/k-{i:04d}": b"k%d" % i for i in range(1000)}, **{f"two/{i}": b"t%d" % i for i in range(50)}}
SHOWN = {k: v for k, v in KEYS.items() if k not in {"m/", "w/../v", "one/k", "one/zz"}}
LATE = "late/../x"
"""An unsafe key uploaded between the two relists: logged by the second, once."""


def _put(s3: S3Server, bucket: str, objects: dict[str, bytes]) -> None:
    client = s3.client()
    client.create_bucket(Bucket=bucket)
    with ThreadPoolExecutor(8) as pool:  # the client's pool holds 10 connections
        list(pool.map(lambda kv: client.put_object(Bucket=bucket, Key=f"ds/{kv[0]}", Body=kv[1]),
                      objects.items()))


def _catalog_lines(sp: SamplerProc) -> list[str]:
    return [line for line in sp.log_text().splitlines() if "epochfs.catalog INFO catalog: " in line]


def _skip_lines(sp: SamplerProc, key: str) -> int:
    return sum(f"skipping key {key!r}: " in line for line in sp.log_text().splitlines())


def _skipped_total(cache: Path) -> int:
    with Store(cache) as store:
        return store.stats().skipped_total


def _left_to_fetch(cache: Path) -> int:
    """Catalog rows to fetch that are not cached yet (clash-skipped rows are never fetched)."""
    return int(index_rows(cache, "SELECT COUNT(*) FROM catalog c WHERE skipped = 0 "
                                 "AND NOT EXISTS (SELECT 1 FROM samples s WHERE s.key = c.key)")[0][0])


def _relist(sp: SamplerProc, reports: int) -> str:
    """Ask the sampler for a relist; its catalog line (the ``reports``-th)."""
    asked = subprocess.run([EPOCHFS, "relist", "--cache", str(sp.cache)], env=ENV, capture_output=True,
                           text=True, timeout=120)
    assert asked.returncode == 0, asked.stderr
    wait_until(lambda: len(_catalog_lines(sp)) >= reports, timeout=120, what=f"catalog report {reports}")
    return _catalog_lines(sp)[reports - 1]


@pytest.mark.long
def test_the_epoch_holds_what_a_reader_is_shown_and_relists_log_each_skip_once(
        s3: S3Server, tmp_path: Path) -> None:
    _put(s3, "bkt", KEYS)
    cache = tmp_path / "cache"
    with running_sampler(cache, "s3://bkt/ds", "--endpoint-url", s3.endpoint, "--capacity", "64Mi",
                         "--scrub-rate", "0", env=s3_env(s3.endpoint)) as sp:
        wait_until(lambda: _catalog_lines(sp), timeout=120, what="the listing's report")
        wait_until(lambda: _left_to_fetch(cache) == 0, timeout=180, what="every cataloged key cached")
        cut = subprocess.run([EPOCHFS, "cut", "--cache", str(cache)], env=ENV, capture_output=True,
                             text=True, timeout=120)
        assert cut.returncode == 0, cut.stderr
        with Store(cache) as store:
            info = store.epochs()[0]
            files = store.epoch_files(0)
            tree = EpochTree(epoch=0, cut_at=0.0, files=files, link_root=tmp_path)
            assert info.samples == len(files) == tree.files_shown == len(SHOWN), \
                (info.samples, len(files), tree.files_shown)
            held = {f.path: (store.objects_dir / f.object_name).read_bytes() for f in files}
        assert held == SHOWN, sorted(set(held) ^ set(SHOWN))[:5]
        assert index_rows(cache, "SELECT key FROM samples WHERE key IN ('one/k', 'one/zz')") == []
        sid = str(index_rows(cache, "SELECT sid FROM catalog WHERE key='one/k'")[0][0])
        assert not (cache / "objects" / object_name(sid)).exists(), "one/k is never fetched"
        line = _catalog_lines(sp)[0]
        assert "2 file/folder name clash(es) skipped" in line and "1 unsafe key(s) skipped" in line, line
        for key in ("one/k", "one/zz", "w/../v"):
            assert _skip_lines(sp, key) == 1, key
        assert _skip_lines(sp, "m") == _skip_lines(sp, "w") == 0, "no folder of their names is shown"
        assert _skipped_total(cache) == 3

        again = _relist(sp, 2)
        assert "2 file/folder name clash(es) skipped" in again and "1 unsafe key(s) skipped" in again, again
        s3.client().put_object(Bucket="bkt", Key=f"ds/{LATE}", Body=b"late")
        third = _relist(sp, 3)
        assert "2 unsafe key(s) skipped" in third, third
        for key in ("one/k", "one/zz", "w/../v", LATE):
            assert _skip_lines(sp, key) == 1, f"{key}: logged once, by the listing that first skipped it"
        assert _skipped_total(cache) == 4, "each skip counted once"
