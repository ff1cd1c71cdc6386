"""Each skipped key is logged once, not again by every relist; the counts stay right.

A listing skips unsafe keys, objects over the object limit and file/folder name clashes, counts
them in ``skipped_total`` once and logs each one by one (docs/sampler.md, "Keys that cannot be
paths"). A relist skips the same keys again: logged again, the same lines would come back at
every ``--relist-interval`` for ever. A relist logs only its summary line (the counts by reason)
and the keys it skips that the lister had not skipped before. A lister started again on a cache
listed before (a restart) knows none of them: its first relist logs none one by one, its later
ones the new keys. A real :class:`~epochfs.sidecar.listing.Lister` over a real S3 server (moto)
into a real :class:`~epochfs.sidecar.store.Store`; ``epochfs relist`` is the same run with
``fresh`` (tests/sampler/test_clash_split_epoch.py runs it through a sampler).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pytest
from common import S3Server, put_objects

from epochfs.sidecar.listing.lister import Lister
from epochfs.sidecar.listing.sources import source_for
from epochfs.sidecar.remote import open_remote
from epochfs.sidecar.store import Store

LIMIT = 50
OBJECTS = {"a/x": b"a", "bad/../k": b"unsafe", "c": b"file c", "c/d": b"below c", "huge.bin": b"h" * 100}
LINES = {"bad/../k": "skipping key 'bad/../k': '..' component",
         "c": "skipping key 'c': it is also a folder of other keys",
         "huge.bin": "skipping 'huge.bin': 100 bytes is over the object limit 50"}


def _lister(store: Store, s3: S3Server) -> Lister:
    remote = open_remote("s3://bkt", endpoint_url=s3.endpoint, read_timeout=10)
    return Lister(store, source_for(remote), seed=3, threads=2, object_limit=LIMIT, stop=threading.Event())


def _count(caplog: pytest.LogCaptureFixture, line: str) -> int:
    return sum(r.getMessage() == line for r in caplog.records)


def _summaries(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("catalog: ")]


def _listed(lister: Lister) -> str:
    """A relist to the end (``epochfs relist``); its summary line."""
    report = lister.run(fresh=True)
    assert report.complete
    return str(report)


def test_a_relist_logs_only_the_keys_it_did_not_skip_before(
        s3: S3Server, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="epochfs.catalog")
    put_objects(s3, "bkt", OBJECTS)
    with Store(tmp_path / "cache", create=True) as store:
        lister = _lister(store, s3)
        assert lister.run().complete
        assert all(_count(caplog, line) == 1 for line in LINES.values()), caplog.text
        assert store.stats().skipped_total == 3

        summary = _listed(lister)
        assert "1 unsafe key(s) skipped" in summary and "1 over the object limit skipped" in summary
        assert "1 file/folder name clash(es) skipped" in summary, summary
        s3.client().put_object(Bucket="bkt", Key="late/../x", Body=b"late")
        summary = _listed(lister)
        assert "2 unsafe key(s) skipped" in summary, summary
        for key, line in LINES.items():
            assert _count(caplog, line) == 1, f"{key}: logged again by a relist"
        assert _count(caplog, "skipping key 'late/../x': '..' component") == 1, "a new skip is logged"
        assert len(_summaries(caplog)) == 3, "every listing says what it skipped"
        assert store.stats().skipped_total == 4, "each skip counted once"

        restarted = _lister(store, s3)  # a sampler started again on the listed cache
        _listed(restarted)
        s3.client().put_object(Bucket="bkt", Key="later/../y", Body=b"later")
        _listed(restarted)
        for key, line in {**LINES, "late/../x": "skipping key 'late/../x': '..' component"}.items():
            assert _count(caplog, line) == 1, f"{key}: logged again after a restart"
        assert _count(caplog, "skipping key 'later/../y': '..' component") == 1
        assert len(_summaries(caplog)) == 5
        assert store.stats().skipped_total == 5
