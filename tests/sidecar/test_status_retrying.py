"""The mount's ``status.json`` says why no data comes while the remote cannot be reached (issue 21).

A trainer reads only the mount: ``/readyz`` and ``epochfs status`` are the sidecar container's.
So the supervisor records the sampler's retry in the index (``Meta.SAMPLER_RETRYING``) and both
views render it into ``status.json`` as ``sampler_retrying``, the line ``/readyz`` gives as its
reason. A real ``epochfs sidecar`` against a closed port shows it in the mount's file (and so in
the torch client's waiting line); once a proxy to a real S3 server answers on that port and the
sampler has run 30 s, it goes. The folder view shows the same, and a stopped sidecar leaves none behind.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from common import S3Server, free_port, put_objects, random_objects, wait_until
from faultproxy import FaultProxy
from sidecar_helpers import running_sidecar

from epochfs.fuse.view import View
from epochfs.sidecar.store import Meta, Policy, Store
from epochfs.sidecar.store.stats import RETRYING_MAX_AGE, retry_line
from epochfs.torchclient.describe import describe_root
from epochfs.torchclient.layout import read_status

needs_fuse = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                                reason="needs root and FUSE")

RETRY_LINE = re.compile(r"^remote unreachable: (?P<why>.+); retry (?P<n>\d+) (in \d+ s|running for \d+ s)$")


def _credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials so that botocore gets as far as connecting (none at all would be a refusal)."""
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)


def _retrying(mount: Path) -> str | None:
    """``sampler_retrying`` of the mount's status.json (None: no file yet, or no such field)."""
    doc = read_status(mount)
    return None if doc is None else doc.get("sampler_retrying")


def _wait_for_line(mount: Path) -> re.Match[str]:
    line = wait_until(lambda: _retrying(mount), timeout=90, interval=0.2,
                      what="sampler_retrying in the mount's status.json")
    m = RETRY_LINE.match(line)
    assert m is not None, line
    assert "Connection refused" in m["why"] and "cannot list s3://data" in m["why"], line
    return m


def _says_why_until_the_remote_answers(s3: S3Server, tmp_path: Path, *, until_gone: bool) -> None:
    put_objects(s3, "data", random_objects(8, 1024))  # there before the remote first answers
    port = free_port()  # nothing listens there until the proxy to the S3 server opens it
    with running_sidecar(tmp_path, remote="s3://data", endpoint=f"http://127.0.0.1:{port}",
                         expect_ready=False) as car:
        m = _wait_for_line(car.mount)
        # What the trainer's waiting line says, read through the same mount.
        assert f"; sampler: remote unreachable: {m['why']}; retry " in describe_root(car.mount)
        with FaultProxy(upstream=s3.endpoint, port=port):  # the remote answers (no fault planned)
            wait_until(lambda: car.get("/readyz")[0] == 200, timeout=90, what="/readyz 200")
            if until_gone:
                # After 30 s of running the line goes (as /readyz's).
                wait_until(lambda: read_status(car.mount) is not None and _retrying(car.mount) is None,
                           timeout=150, interval=0.5, what="sampler_retrying gone once the remote answers")
                assert "sampler:" not in describe_root(car.mount)
    with Store(tmp_path / "cache") as store:
        assert store.meta(Meta.SAMPLER_RETRYING) is None, "a stopped sidecar leaves none behind"


@pytest.mark.fuse
@needs_fuse
def test_the_mounts_status_says_why_the_remote_cannot_be_reached(s3: S3Server, tmp_path: Path) -> None:
    _says_why_until_the_remote_answers(s3, tmp_path, until_gone=False)


@pytest.mark.slow
@pytest.mark.fuse
@needs_fuse
def test_the_mounts_status_says_why_until_the_remote_answers(s3: S3Server, tmp_path: Path) -> None:
    """Slow: the line goes after the sampler has run 30 s (``STABLE_AFTER``); ``make test-slow``."""
    _says_why_until_the_remote_answers(s3, tmp_path, until_gone=True)


def test_the_folder_view_says_it_too_and_a_stopped_sidecar_leaves_none(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _credentials(monkeypatch)
    (tmp_path / "shared").mkdir()
    folder = tmp_path / "shared" / "view"
    extra = ("--view", "folder", "--link-root", str(tmp_path / "cache" / "objects"))
    closed = f"http://127.0.0.1:{free_port()}"
    with running_sidecar(tmp_path, remote="s3://data", endpoint=closed, extra=extra, mount=folder,
                         expect_ready=False) as car:
        _wait_for_line(folder)
        with Store(car.cache) as store:
            assert store.meta(Meta.SAMPLER_RETRYING) is not None
    with Store(tmp_path / "cache") as store:
        assert store.meta(Meta.SAMPLER_RETRYING) is None, "the retry outlived its supervisor"


def test_the_view_renders_the_recorded_retry_and_ignores_a_dead_supervisors(tmp_path: Path) -> None:
    """The store's value as the views render it: the count runs at each read; one a supervisor
    killed with -9 left (written long ago) is not shown."""
    with Store(tmp_path / "cache", create=True) as store:
        store.configure(Policy(capacity=10**6))
        view = View(store=store, link_root=tmp_path / "cache" / "objects")
        assert b"sampler_retrying" not in view.render_status()
        now = time.time()
        store.set_sampler_retrying({"pid": 1, "waiting": "remote unreachable: r", "retry": 3,
                                    "next_start": now + 8.4, "started": None})
        assert b'"sampler_retrying": "remote unreachable: r; retry 3 in 8 s"' in view.render_status()
        view.refresh()
        assert b"remote unreachable: r; retry 3 in" in view.snapshot.status  # what the folder view writes
        text = store.meta(Meta.SAMPLER_RETRYING)
        assert retry_line(text, now + 10) == "remote unreachable: r; retry 3 in 0 s"
        assert retry_line(text, now + RETRYING_MAX_AGE + 1) is None
        store.set_sampler_retrying({"pid": 1, "waiting": "remote unreachable: r", "retry": 3,
                                    "next_start": None, "started": now - 1.2})
        running = retry_line(store.meta(Meta.SAMPLER_RETRYING), now)
        assert running == "remote unreachable: r; retry 3 running for 1 s"
        store.set_sampler_retrying(None)
        assert b"sampler_retrying" not in view.render_status()
    assert retry_line("not json", now) is None and retry_line('{"waiting": ""}', now) is None
