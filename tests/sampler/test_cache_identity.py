"""Whose a cache is: a remote refused at its first listing makes nothing it could hold on to, and two
spellings of one remote are one remote (the real ``epochfs sample`` over ``file://`` folders).

Before: ``--remote file:///…/missing`` (a typo) exited 2, and the corrected command then exited 2 too,
"the cache was filled with 'file:///…/missing'", though it held nothing; and ``s3://b/p/`` or
``file:///d//ds`` was refused on a cache of ``s3://b/p`` or ``file:///d/ds``, the message asking to
remove the cache and all it held."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from common import wait_until

from epochfs.sidecar.remote.urls import same_remote
from epochfs.sidecar.store import INDEX_NAME, Store

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
ENV = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}


def _sample(cache: Path, remote: str, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EPOCHFS, "sample", "--cache", str(cache), "--remote", remote, *more],
                          env=ENV, capture_output=True, text=True, timeout=60)


def _samples(cache: Path) -> int:
    if not (cache / INDEX_NAME).exists():
        return 0
    with Store(cache) as store:
        return store.stats().samples


def test_a_remote_refused_at_its_first_listing_leaves_the_cache_to_the_next(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    for i in range(4):
        (data / f"{i}.bin").write_bytes(os.urandom(64))
    cache = tmp_path / "cache"
    typo = _sample(cache, (tmp_path / "dta").as_uri())
    assert typo.returncode == 2, typo.stderr
    proc = subprocess.Popen([EPOCHFS, "sample", "--cache", str(cache), "--remote", data.as_uri()],
                            env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: _samples(cache) == 4 or proc.poll() is not None, timeout=60,
                   what="the corrected remote's samples")
        assert proc.poll() is None, proc.communicate()[1][-2000:]
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err[-2000:]
    # Another spelling of the same folder is the same remote: the next check is the seed's.
    other_spelling = f"file://{data.parent}//{data.name}/"
    r = _sample(cache, other_spelling, "--seed", "7")
    assert r.returncode == 2 and "--seed" in r.stderr and "--remote" not in r.stderr, r.stderr
    # A cache that holds samples stays its remote's.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = _sample(cache, elsewhere.as_uri())
    assert r.returncode == 2 and "--remote: the cache" in r.stderr and "was filled with" in r.stderr, r.stderr


@pytest.mark.parametrize(("one", "other", "same"), [
    ("s3://b/p", "s3://b/p/", True), ("s3://b/p", "s3://b//p//", True), ("s3://b/p", "s3://b/P", False),
    ("s3://b/p", "s3://c/p", False), ("file:///d/ds", "file:///d//ds/", True), ("gs://b", "gs://b/", True),
    ("s3://b/run#1", "s3://b/run#1/", True), ("s3://b/p", "s3://b/p2", False),
    ("https://h/base/", "https://h/base", False), ("s3://b/a//b", "s3://b/a/b", False),
    ("file:///d/a//b", "file:///d/a/b", True),
])
def test_two_spellings_of_one_remote(one: str, other: str, same: bool) -> None:
    assert (same_remote(one) == same_remote(other)) is same
