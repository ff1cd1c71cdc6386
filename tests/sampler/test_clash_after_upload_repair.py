"""A cached file whose name a later upload turns into a folder is still the remote's: repaired, not lost.

The remote holds ``k/a.bin``, cached; then ``k/a.bin/inner.bin`` is uploaded and a relist sees
``k/a.bin`` as both a file and a folder (a file/folder name clash: the file is skipped, it cannot
be shown as both). The relist dropped its catalog row and logged it "gone from the remote
dropped", although the remote still has it unchanged; and once its cached object was damaged
(``epochfs verify``), the repair found no catalog row and marked the sample lost: EIO in every
epoch holding it, though the design says a damaged object is "fetched again into its place" and
losses are for keys the remote no longer has. A clash-skipped key now keeps its catalog row,
marked not to be fetched as a new sample; its repair fetches it again into its place.

The real ``epochfs sample``, ``relist`` and ``verify`` commands over S3 (moto): a file system
remote cannot hold a name that is both a file and a folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from common import S3Server, put_objects, wait_until
from integrity_helpers import damage
from sampler_helpers import SamplerProc, index_rows, running_sampler, s3_env

from epochfs.sidecar.store import Store, object_name

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
ENV = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
OBJECTS = {"k/a.bin": os.urandom(700), "k/b.bin": os.urandom(800), "other.bin": os.urandom(900)}


def _epochfs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EPOCHFS, *args], env=ENV, capture_output=True, text=True, timeout=120)


def _stats(cache: Path) -> tuple[int, int, int]:
    """(samples cached, samples repaired in place, samples lost)."""
    with Store(cache) as store:
        stats = store.stats()
        return stats.samples, stats.repaired_total, stats.lost


def _catalog_lines(sp: SamplerProc) -> list[str]:
    return [line for line in sp.log_text().splitlines() if "epochfs.catalog INFO catalog: " in line]


@pytest.mark.long
def test_a_cached_key_that_became_a_folder_too_is_repaired_not_lost(s3: S3Server, tmp_path: Path) -> None:
    put_objects(s3, "bkt", {f"ds/{k}": v for k, v in OBJECTS.items()})
    cache = tmp_path / "cache"
    with running_sampler(cache, "s3://bkt/ds", "--endpoint-url", s3.endpoint, "--capacity", "10Mi",
                         "--scrub-rate", "0", env=s3_env(s3.endpoint)) as sp:
        wait_until(lambda: _stats(cache)[0] == 3, timeout=60, what="every object cached")
        wait_until(lambda: len(_catalog_lines(sp)) == 1, what="the first listing's report")

        s3.client().put_object(Bucket="bkt", Key="ds/k/a.bin/inner.bin", Body=os.urandom(500))
        relist = _epochfs("relist", "--cache", str(cache))
        assert relist.returncode == 0, relist.stderr
        wait_until(lambda: len(_catalog_lines(sp)) == 2, timeout=60, what="the relist's report")
        line = _catalog_lines(sp)[1]
        assert "1 file/folder name clash(es) skipped" in line, line
        assert "gone from the remote" not in line, f"k/a.bin is still on the remote: {line}"
        assert "skipping key 'k/a.bin': it is also a folder of other keys" in sp.log_text()
        assert index_rows(cache, "SELECT key FROM catalog WHERE key='k/a.bin'") == [("k/a.bin",)], \
            "its row stays: the remote lists it"
        wait_until(lambda: _stats(cache)[0] == 4, timeout=60, what="k/a.bin/inner.bin cached")

        (sid,), = index_rows(cache, "SELECT sid FROM samples WHERE key='k/a.bin'")
        path = cache / "objects" / object_name(str(sid))
        with Store(cache) as store:
            assert path == store.objects_dir / object_name(str(sid))
        damage(path, "flip")
        verify = _epochfs("verify", "--cache", str(cache))
        assert "k/a.bin" in verify.stdout + verify.stderr, verify.stderr
        wait_until(lambda: _stats(cache)[1:] != (0, 0), timeout=60, what="the repair or the loss")
        assert _stats(cache)[1:] == (1, 0), "repaired in place, not lost: the remote still has it"
        assert path.read_bytes() == OBJECTS["k/a.bin"], "the right bytes in place"
        assert "lost from the remote" not in sp.log_text()
        assert index_rows(cache, "SELECT COUNT(*) FROM samples WHERE key='k/a.bin'") == [(1,)], \
            "the same sample, not a new one"
