"""A trainer of one cache never cuts epochs in, nor reports its reads to, another cache's sidecar.

Why: the client finds its sidecar through the ``report_url`` the mount's status.json names. A
folder view is left as published when its sidecar stops, and an ``epochfs mount`` of a cache shows
the URL the index recorded, so the URL outlives its sidecar; another sidecar (another dataset) may
listen on that port since. Its cut requests then cut that sidecar's epochs (smaller and earlier than
its own trainer's boundary) and its reads counted as that trainer's (client metrics, in-use pins).
Each request now names the cache the mount's status.json names (``X-Epochfs-Cache``), a sidecar
serving another cache answers 409 and cuts or counts nothing, and a sidecar's clean exit removes
its URL from the index. Real sidecars (the CLI in subprocesses) over file:// remotes, folder views,
one port handed from the first sidecar to the second.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import free_port, wait_until
from fuse_helpers import mounted
from sidecar_helpers import Sidecar, file_remote, running_sidecar, sidecar_argv

from epochfs.sidecar.endpoints.cacheid import CacheIdentity, header_value
from epochfs.sidecar.store import Store
from epochfs.sidecar.store.meta import Meta
from epochfs.torchclient import EpochDataset, EpochLoader, layout
from epochfs.torchclient.cutask import CutAsker
from epochfs.torchclient.report import CACHE_HEADER, ClientReporter, cache_of_status, report_url_from_env


@pytest.fixture(autouse=True)
def no_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EPOCHFS_REPORT_URL", raising=False)


@contextlib.contextmanager
def folder_sidecar(place: Path, port: int) -> Iterator[Sidecar]:
    """A folder-view sidecar on ``port`` over a remote of its own; stopped by SIGTERM (exit 0)."""
    place.mkdir()
    remote = file_remote(place)
    cache, view, log = place / "cache", place / "view", place / "sidecar.log"
    argv = sidecar_argv(remote=remote, endpoint="", cache=cache, mount=view, port=port,
                        extra=("--view", "folder", "--kube-reporting", "0"))
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    car = Sidecar(proc, view, cache, port, log)
    try:
        wait_until(lambda: car.get("/readyz")[0] == 200 or proc.poll() is not None, timeout=60,
                   what="/readyz")
        assert proc.poll() is None, car.log_text()[-5000:]
        yield car
    except BaseException:
        sys.stderr.write(f"--- {log} ---\n{car.log_text()[-20000:]}\n")
        raise
    finally:
        code = car.stop()
    assert code == 0, car.log_text()[-5000:]


def names_port_and_cache(view: Path, port: int) -> bool:
    doc = layout.read_status(view) or {}
    shard = doc.get(layout.SHARD_KEY)
    return f":{port}/" in str(doc.get(layout.REPORT_URL_KEY)) and isinstance(shard, dict)


def cached(car: Sidecar) -> int:
    with Store(car.cache) as store:
        return store.stats().samples


def cut_epochs(car: Sidecar) -> list[int]:
    with Store(car.cache) as store:
        return [e.epoch for e in store.epochs()]


def post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method="POST", headers=headers)
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request, timeout=10) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_a_stale_report_url_reaches_another_cache_sidecar_which_refuses(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    with folder_sidecar(tmp_path / "A", port) as a:
        wait_until(lambda: names_port_and_cache(a.mount, port), timeout=30, what="A's status.json")
    assert names_port_and_cache(a.mount, port), layout.read_status(a.mount)  # left as published
    with folder_sidecar(tmp_path / "B", port) as b:
        wait_until(lambda: cached(b) >= 6, timeout=30, what="B's samples cached: a cut of B would be made")
        caplog.set_level(logging.WARNING, logger="epochfs.torchclient")
        with pytest.raises(TimeoutError) as caught:
            EpochDataset(a.mount, 0, timeout=2, progress=None)
        assert cut_epochs(b) == [], "A's trainer cut an epoch of B"
        said = str(caught.value)
        a_node, b_node = (str((layout.read_status(c.mount) or {})[layout.SHARD_KEY]["node"]) for c in (a, b))
        assert f"this sidecar serves the cache {b_node}, not {a_node}" in said, said
        assert "refused a cut request from a reader of another cache" in b.log_text()

        reporter = ClientReporter(url=report_url_from_env(), root=a.mount, interval=3600)
        reporter.reading(0)
        for _ in range(2):
            reporter.add(samples=300, nbytes=300 * 512, wait_seconds=0.5)
            assert not reporter.flush()
        assert (b.metric("epochfs_client_samples_total") or 0.0) == 0.0
        reporter.close()
        refusals = [r.getMessage() for r in caplog.records if "reports to" in r.getMessage()]
        assert len(refusals) == 1 and a_node in refusals[0], refusals

        # B's own readers: with the header (the client) and without it (an older client, curl).
        asker = CutAsker.for_mount(b.mount)
        assert asker is not None
        answer = asker.ask(0)
        assert answer is not None and answer.state in ("live", "waiting"), asker.trouble()
        assert asker.cache is not None
        wait_until(lambda: layout.epoch_exists(b.mount, 0), timeout=30, what="B's epoch 0 published")
        own = ClientReporter(url=report_url_from_env(), root=b.mount, interval=3600)
        own.add(samples=5, nbytes=5 * 512, wait_seconds=0.0)
        assert own.flush()
        own.close()
        report = json.dumps({"samples": 2, "bytes": 2, "wait_seconds": 0}).encode()
        code, _ = post(f"{b.base}/v1/client-report", report, {"Content-Type": "application/json"})
        assert code == 204
        code, body = post(f"{b.base}/v1/cut?epoch=1", b"", {})
        assert code in (200, 202), body
        assert b.metric("epochfs_client_samples_total") == 7.0


@pytest.mark.fuse
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE")
def test_a_trainer_of_a_mount_alone_reads_without_touching_another_sidecar(tmp_path: Path) -> None:
    """The report's case: cache A, once run by a sidecar killed (its URL left in the index), is
    served by ``epochfs mount`` alone; folder-view sidecar B listens on that port. A whole
    EpochLoader pass over A's epoch 0 cuts nothing of B's and counts nothing there."""
    with folder_sidecar(tmp_path / "B", free_port()) as b:
        wait_until(lambda: cached(b) >= 6, timeout=30, what="B's samples cached: a cut of B would be made")
        (tmp_path / "A").mkdir()
        with running_sidecar(tmp_path / "A", remote=file_remote(tmp_path / "A"), endpoint="",
                             extra=("--kube-reporting", "0")) as a:
            wait_until(lambda: names_port_and_cache(a.mount, a.port) and cached(a) >= 6, timeout=30,
                       what="A's status.json and samples")
        with Store(a.cache) as store:  # what a sidecar killed leaves: its URL, now B's port
            store.set_meta(Meta.REPORT_URL, f"{b.base}/v1/client-report")
        with mounted(a.cache, tmp_path / "A" / "alone"), \
                EpochLoader(tmp_path / "A" / "alone", batch_size=2, num_workers=0, decode="bytes",
                            timeout=20, progress=None) as loader:
            assert names_port_and_cache(loader.root, b.port), layout.read_status(loader.root)
            read = sum(len(batch) for batch in loader.epoch(0))
            loader.reporter.close()  # the epoch's last report posted (and refused) before the checks
            assert read == 6
            assert cut_epochs(b) == [], "A's lookup or cut request cut an epoch of B"
            assert (b.metric("epochfs_client_samples_total") or 0.0) == 0.0
            assert loader.reporter.failed_reports >= 1 and loader.reporter.sent_reports == 0


def test_a_clean_exit_removes_the_report_url_from_the_index(tmp_path: Path) -> None:
    """A view of the cache served later without its sidecar (``epochfs mount``) names no port."""
    port = free_port()
    with folder_sidecar(tmp_path / "A", port) as a:
        wait_until(lambda: names_port_and_cache(a.mount, port), timeout=30, what="A's status.json")
        with Store(a.cache) as store:
            assert store.meta(Meta.REPORT_URL) == f"http://127.0.0.1:{port}/v1/client-report"
    with Store(a.cache) as store:
        assert store.meta(Meta.REPORT_URL) is None


def test_the_sidecar_knows_its_cache_under_another_spelling(tmp_path: Path) -> None:
    """A symlink or ``..`` in the path the view names is the same cache; another folder is not."""
    (tmp_path / "cache").mkdir()
    (tmp_path / "other").mkdir()
    os.symlink(tmp_path / "cache", tmp_path / "link")
    me = CacheIdentity.of(tmp_path / "cache")
    assert me.serves(me.name)
    assert me.serves(f"{me.host}:{tmp_path / 'link'}")
    assert me.serves(f"{me.host}:{tmp_path / 'other' / '..' / 'cache'}")
    assert not me.serves(f"{me.host}:{tmp_path / 'other'}")
    assert not me.serves(f"another-host:{me.path}")
    assert not me.serves("no colon at all")
    refusal = me.refusal(f"{me.host}:{tmp_path / 'other'}", "report")
    assert refusal.code == 409 and json.loads(refusal.body)["state"] == "other_cache"
    assert CACHE_HEADER == "X-Epochfs-Cache"


def test_any_cache_path_goes_through_the_header(tmp_path: Path) -> None:
    """A non-ASCII or non-UTF-8 cache path is sent as its bytes, and read back as the view spells it."""
    for name in ("caché", os.fsdecode(b"cache-\xff"), "a b+c:d"):
        (tmp_path / name).mkdir()
        me = CacheIdentity.of(tmp_path / name)
        (tmp_path / "view").mkdir()
        layout_doc = {layout.SHARD_KEY: {"index": 0, "count": 1, "node": me.name}}
        (tmp_path / "view" / layout.CONTROL_DIR).mkdir()
        (tmp_path / "view" / layout.CONTROL_DIR / layout.STATUS_NAME).write_text(json.dumps(layout_doc))
        sent = cache_of_status(tmp_path / "view")
        assert sent is not None and sent.isascii()
        assert header_value(sent.encode()) == me.name and me.serves(header_value(sent.encode()))
        shutil.rmtree(tmp_path / "view")
