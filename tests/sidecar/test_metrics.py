"""Metrics: values after known actions (injected registries), multiprocess merging across child
restarts, the exposition under ``promtool check metrics``, the client report endpoint, fanotify
counting of served samples, and the dashboard naming only exported metrics."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from common import ROOT, wait_until
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from epochfs.fuse.metrics import FuseMetrics
from epochfs.sidecar import metrics
from epochfs.sidecar.endpoints import CLIENT_REPORT_PATH, ClientReport, Endpoints
from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.served import OpenCounter
from epochfs.sidecar.store import Admission, Meta, Policy, Store
from epochfs.sidecar.store.epochpins import RETIRE_GRACE

DASHBOARD = ROOT / "helm" / "epochfs" / "dashboards" / "epochfs.json"

ISSUE_NAMES = {
    "counter": [
        "epochfs_remote_bytes_total", "epochfs_remote_objects_total", "epochfs_fuse_requests_total",
        "epochfs_fuse_errors_total", "epochfs_served_samples_total", "epochfs_served_bytes_total",
        "epochfs_evicted_samples_total", "epochfs_evicted_bytes_total", "epochfs_cuts_total",
        "epochfs_client_samples_total", "epochfs_client_bytes_total",
        "epochfs_client_wait_seconds_total",
    ],
    "gauge": [
        "epochfs_cache_bytes", "epochfs_cache_capacity_bytes", "epochfs_cache_samples",
        "epochfs_catalog_objects", "epochfs_epoch_latest", "epochfs_epoch_samples",
        "epochfs_backpressure", "epochfs_inflight_downloads",
    ],
    "histogram": ["epochfs_remote_fetch_seconds", "epochfs_cut_wait_seconds"],
}


def put(store: Store, key: str, size: int) -> Admission:
    reservations = Reservations(store)
    assert reservations.reserve(size)
    temp = store.temp_path()
    body = hashlib.sha256(key.encode()).digest() * (size // 32 + 1)
    with open(temp, "wb") as f:
        f.write(body[:size])
    sid = hashlib.blake2b(key.encode(), digest_size=16).hexdigest()
    a = Admission(key, sid, size, "md5:x", "v1", temp)
    reservations.admit([a])
    return a


@pytest.fixture
def store(cache_dir: Path) -> Store:
    s = Store(cache_dir, create=True)
    s.configure(Policy(capacity=1000, keep_epochs=1, headroom=0.0))
    return s


def samples_of(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_process_metrics_values_after_known_actions() -> None:
    reg = CollectorRegistry()
    m = metrics.ProcessMetrics(registry=reg)
    get = reg.get_sample_value
    assert get("epochfs_remote_objects_total", {"result": "retried"}) == 0
    m.remote_retried()
    m.remote_retried()
    m.remote_failed()
    m.observe_fetch(0.3)
    m.observe_fetch(7.0)
    with m.download():
        assert get("epochfs_inflight_downloads") == 1
    m.cut_waited(1.5)
    m.cut_waited(-1)  # clock skew between processes never makes a negative wait
    assert get("epochfs_remote_retries_total") == 2
    assert get("epochfs_remote_objects_total", {"result": "retried"}) == 2, "deprecated, kept a release"
    assert get("epochfs_remote_objects_total", {"result": "failed"}) == 1
    m.throttled()
    assert get("epochfs_remote_throttled_requests_total") == 1
    assert get("epochfs_throttled_total") == 1, "deprecated, kept a release"
    assert get("epochfs_remote_fetch_seconds_count") == 2
    assert get("epochfs_remote_fetch_seconds_bucket", {"le": "0.5"}) == 1
    assert get("epochfs_remote_fetch_seconds_sum") == pytest.approx(7.3)
    assert get("epochfs_inflight_downloads") == 0
    assert get("epochfs_cut_wait_seconds_count") == 2
    assert get("epochfs_cut_wait_seconds_sum") == pytest.approx(1.5)


def test_fuse_metrics_values_after_known_requests() -> None:
    reg = CollectorRegistry()
    m = FuseMetrics(registry=reg)
    m.init_ops(["getattr", "readlink", "mkdir"])
    get = reg.get_sample_value
    assert get("epochfs_fuse_requests_total", {"op": "getattr"}) == 0
    assert get("epochfs_fuse_errors_total", {"op": "getattr", "errno": "ENOENT"}) == 0
    m.request("getattr")
    m.request("mkdir", errno.EROFS)
    m.request("getattr", errno.ENOENT)
    m.request("ioctl", errno.ENOTTY)  # unknown op and errno fold into "other"
    assert get("epochfs_fuse_requests_total", {"op": "getattr"}) == 2
    assert get("epochfs_fuse_requests_total", {"op": "mkdir"}) == 1
    assert get("epochfs_fuse_errors_total", {"op": "mkdir", "errno": "EROFS"}) == 1
    assert get("epochfs_fuse_errors_total", {"op": "getattr", "errno": "ENOENT"}) == 1
    assert get("epochfs_fuse_errors_total", {"op": "other", "errno": "other"}) == 1
    assert get("epochfs_fuse_errors_total", {"op": "readlink", "errno": "EROFS"}) is None


def test_store_collector_reads_persisted_counters_and_gauges(store: Store) -> None:
    sidecar = metrics.SidecarMetrics(registry=CollectorRegistry())
    reg = metrics.sidecar_registry(stats=store.stats, multiproc_dir=None, sidecar=sidecar)
    values = samples_of(reg)
    assert values[("epochfs_cache_bytes", ())] == 0
    assert ("epochfs_epoch_latest", ()) not in values  # absent before the first cut
    store.configure(Policy(capacity=1000, keep_epochs=1, headroom=0.5))  # epochs hold <= 500 bytes
    for i in range(4):
        put(store, f"train/{i}.bin", 200)
    store.count_skip(3)
    assert store.cut() == 0
    for i in range(4, 6):
        put(store, f"train/{i}.bin", 100)
    assert store.cut() == 1  # holds the newest 400 bytes: samples 4, 5 and 3
    store.retire(now=time.time() - RETIRE_GRACE - 1)  # a grace ago: its samples may go now
    reservations = Reservations(store)
    assert reservations.reserve(500)  # evicts samples 0, 1, 2 (600 bytes), which epoch 1 does not hold
    reservations.release(500)
    s = store.stats()
    values = samples_of(reg)
    assert values[("epochfs_remote_objects_total", (("result", "ok"),))] == 6
    assert values[("epochfs_remote_objects_total", (("result", "skipped"),))] == 3
    assert values[("epochfs_remote_bytes_total", ())] == 1000
    assert values[("epochfs_cuts_total", ())] == 2
    assert values[("epochfs_evicted_samples_total", ())] == s.evicted_total == 3
    assert values[("epochfs_evicted_bytes_total", ())] == s.evicted_bytes_total == 600
    assert values[("epochfs_cache_bytes", ())] == s.cache_bytes
    assert values[("epochfs_cache_capacity_bytes", ())] == 1000
    assert values[("epochfs_cache_samples", ())] == s.samples
    assert values[("epochfs_epoch_latest", ())] == 1
    assert values[("epochfs_epoch_samples", ())] == s.epochs[-1]["samples"] == 3
    assert values[("epochfs_backpressure", ())] == 0
    store.set_backpressure("cache full")
    assert samples_of(reg)[("epochfs_backpressure", ())] == 1


def test_sidecar_metrics_served_client_and_resume() -> None:
    reg = CollectorRegistry()
    m = metrics.SidecarMetrics(registry=reg)
    m.add_served(3, 3000)
    m.add_client_report(samples=5, nbytes=500, wait_seconds=0.25)
    totals = m.totals()
    assert totals == {
        "served_samples_total": 3, "served_bytes_total": 3000, "client_samples_total": 5,
        "client_bytes_total": 500, "client_wait_seconds_total": 0.25,
    }
    again = metrics.SidecarMetrics(registry=CollectorRegistry())
    again.resume(totals)
    again.add_served(1, 10)
    assert again.registry.get_sample_value("epochfs_served_samples_total") == 4
    assert again.registry.get_sample_value("epochfs_served_bytes_total") == 3010
    assert again.registry.get_sample_value("epochfs_client_wait_seconds_total") == 0.25


CHILD = """
import os, sys
from epochfs.sidecar.metrics import process_metrics
m = process_metrics()
for _ in range(int(sys.argv[1])):
    m.remote_retried()
m.observe_fetch(0.2)
m.inflight_downloads.inc(int(sys.argv[2]))
from epochfs.fuse.metrics import fuse_metrics
fuse_metrics().request("getattr")
print(os.getpid())
"""


def run_child(mpdir: Path, retried: int, inflight: int) -> int:
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(mpdir))
    out = subprocess.run([sys.executable, "-c", CHILD, str(retried), str(inflight)], env=env,
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def test_multiprocess_values_merge_and_never_go_backwards(tmp_path: Path, store: Store) -> None:
    mpdir = metrics.prepare_multiproc_dir(tmp_path / "mp")
    sidecar = metrics.SidecarMetrics(registry=CollectorRegistry())
    reg = metrics.sidecar_registry(stats=store.stats, multiproc_dir=mpdir, sidecar=sidecar)
    put(store, "train/a.bin", 10)
    first = run_child(mpdir, retried=2, inflight=3)
    values = samples_of(reg)
    assert values[("epochfs_remote_objects_total", (("result", "retried"),))] == 2
    assert values[("epochfs_remote_objects_total", (("result", "ok"),))] == 1  # from the store
    assert values[("epochfs_inflight_downloads", ())] == 3
    # The child "crashed"; the supervisor forgets its live gauge, and a new child starts.
    metrics.forget_process(first, mpdir)
    run_child(mpdir, retried=1, inflight=1)
    values = samples_of(reg)
    assert values[("epochfs_remote_objects_total", (("result", "retried"),))] == 3
    assert values[("epochfs_remote_fetch_seconds_count", ())] == 2
    assert values[("epochfs_fuse_requests_total", (("op", "getattr"),))] == 2
    assert values[("epochfs_inflight_downloads", ())] == 1
    # One family per name: the store's and the sampler's halves of remote_objects are merged.
    text = generate_latest(reg).decode()
    assert text.count("# TYPE epochfs_remote_objects_total counter") == 1
    # A new supervisor empties the folder, so stale files are not summed twice.
    metrics.prepare_multiproc_dir(mpdir)
    assert not list(mpdir.glob("*.db"))


def full_exposition(tmp_path: Path, store: Store) -> str:
    """An exposition with every family present: store, children (multiprocess) and supervisor."""
    mpdir = metrics.prepare_multiproc_dir(tmp_path / "mp-full")
    sidecar = metrics.SidecarMetrics(registry=CollectorRegistry())
    sidecar.add_served(1, 100)
    reg = metrics.sidecar_registry(stats=store.stats, multiproc_dir=mpdir, sidecar=sidecar)
    put(store, "train/x.bin", 100)
    store.cut()
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(mpdir))
    code = (
        "from epochfs.fuse.metrics import fuse_metrics\n"
        "from epochfs.sidecar.metrics import process_metrics\n"
        "m = process_metrics(); fuse_metrics().request('getattr', 2)\n"
        "m.observe_fetch(0.1); m.cut_waited(0.0)\n"
        "with m.download(): pass\n"
    )
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    return generate_latest(reg).decode()


def exported_names(text: str) -> dict[str, str]:
    return {f.name: f.type for f in text_string_to_metric_families(text)}


def test_exposition_has_every_issue_name_and_passes_promtool(tmp_path: Path, store: Store) -> None:
    text = full_exposition(tmp_path, store)
    families = exported_names(text)
    for kind, names in ISSUE_NAMES.items():
        for name in names:
            family = name.removesuffix("_total")
            assert families.get(family) == kind, f"{name} missing or not a {kind}"
    # Bounded labels only: no label value looks like a key, path or epoch number (python_info's
    # labels are the interpreter's, constant for a process).
    for family in text_string_to_metric_families(text):
        if family.name == "python_info":
            continue
        for s in family.samples:
            bounded = {"result", "op", "errno", "child", "reason", "le", "process", "version"}
            assert set(s.labels) <= bounded, s
    promtool = shutil.which("promtool")
    assert promtool, "promtool (Debian package prometheus) is required"
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr


def dashboard_exprs() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in doc["templating"]["list"] if v.get("definition")]
    return exprs


def test_dashboard_names_only_exported_metrics(tmp_path: Path, store: Store) -> None:
    doc = json.loads(DASHBOARD.read_text())
    names = {v["name"] for v in doc["templating"]["list"]}
    assert {"datasource", "namespace", "pod"} <= names
    titles = " ".join(p["title"].lower() for p in doc["panels"])
    for topic in ("remote throughput", "served", "waited", "occupancy", "epoch", "eviction",
                  "backpressure", "latency", "errors", "cut"):
        assert topic in titles, f"no panel about {topic}"
    exported = set()
    for family, kind in exported_names(full_exposition(tmp_path, store)).items():
        suffixes = {"counter": ["_total"], "gauge": [""], "histogram": ["_bucket", "_sum", "_count"]}
        exported |= {family + s for s in suffixes[kind]}
    exprs = dashboard_exprs()
    assert len(exprs) >= 20
    for expr in exprs:
        used = set(re.findall(r"\bepochfs_[a-z0-9_]+", expr))
        assert used, expr
        assert used <= exported, f"{expr}: {used - exported} not exported"
        for panel in doc["panels"]:
            assert panel["datasource"]["uid"] == "${datasource}"


def test_client_report_endpoint(tmp_path: Path) -> None:
    sidecar = metrics.SidecarMetrics(registry=CollectorRegistry())
    reports: list[ClientReport] = []

    def on_report(r: ClientReport) -> None:
        reports.append(r)
        sidecar.add_client_report(samples=r.samples, nbytes=r.nbytes, wait_seconds=r.wait_seconds)

    ep = Endpoints(host="127.0.0.1", port=0, health=lambda: (True, {}), ready=lambda: (False, {"x": 1}),
                   registry=sidecar.registry, on_client_report=on_report)
    ep.start()
    base = f"http://127.0.0.1:{ep.port}"
    try:
        def post(body: bytes) -> int:
            req = urllib.request.Request(base + CLIENT_REPORT_PATH, data=body, method="POST")
            try:
                return int(urllib.request.urlopen(req, timeout=5).status)
            except urllib.error.HTTPError as e:
                return e.code

        assert post(b'{"samples": 4, "bytes": 4096, "wait_seconds": 0.5}') == 204
        assert post(b'{"samples": 1, "bytes": 10}') == 204
        assert post(b'{"samples": -1}') == 400
        assert post(b'{"samples": true}') == 400
        assert post(b'{"path": "/etc/passwd"}') == 400
        assert post(b"not json") == 400
        get = sidecar.registry.get_sample_value
        assert get("epochfs_client_samples_total") == 5
        assert get("epochfs_client_bytes_total") == 4106
        assert get("epochfs_client_wait_seconds_total") == 0.5
        assert urllib.request.urlopen(base + "/healthz", timeout=5).status == 200
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(base + "/readyz", timeout=5)
        assert info.value.code == 503 and json.loads(info.value.read()) == {"ok": False, "x": 1}
        body = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
        assert "epochfs_client_samples_total 5.0" in body
    finally:
        ep.stop()


def test_client_report_parse_rejects_bad_reports() -> None:
    assert ClientReport.parse(b'{"wait_seconds": 1}') == ClientReport(0, 0, 1.0)
    for bad in (b"[]", b'{"bytes": 1.5}', b'{"wait_seconds": "1"}', b'{"bytes": 1e300}'):
        with pytest.raises(ValueError):
            ClientReport.parse(bad)


@pytest.mark.skipif(os.geteuid() != 0, reason="fanotify needs CAP_SYS_ADMIN")
def test_open_counter_counts_opens_of_objects_through_any_path(tmp_path: Path) -> None:
    objects = tmp_path / "cache" / "objects"
    (objects / "ab").mkdir(parents=True)
    files = {objects / "ab" / f"ab{i:030d}": os.urandom(1000 + i) for i in range(3)}
    for p, body in files.items():
        p.write_bytes(body)
    (tmp_path / "cache" / "tmp").mkdir()
    (tmp_path / "cache" / "tmp" / "x.part").write_bytes(b"z" * 50)
    seen = {"samples": 0, "bytes": 0}

    def on_open(n: int, b: int) -> None:
        seen["samples"] += n
        seen["bytes"] += b

    counter = OpenCounter(objects_dir=objects, on_open=on_open, precreate=False)
    assert counter.start()
    try:
        link = tmp_path / "epoch-0.bin"
        link.symlink_to(next(iter(files)))
        (tmp_path / "cache" / "tmp" / "x.part").read_bytes()  # not an object: not counted
        for p in files:
            p.read_bytes()
        wait_until(lambda: seen["samples"] >= 3, timeout=10, what="3 opens counted")
        # Through a symlink, like the FUSE view's entries (after the first event was read:
        # fanotify merges identical queued events).
        link.read_bytes()
        wait_until(lambda: seen["samples"] >= 4, timeout=10, what="the open through a link")
        # A fan-out folder created later is picked up by a rescan.
        (objects / "cd").mkdir()
        late = objects / "cd" / ("cd" + "0" * 30)
        late.write_bytes(b"y" * 7)
        assert counter.rescan() == 1
        late.read_bytes()
        total = sum(len(b) for b in files.values()) + len(files[next(iter(files))]) + 7
        wait_until(lambda: seen["samples"] >= 5, timeout=10, what="5 opens counted")
        assert seen == {"samples": 5, "bytes": total}
    finally:
        counter.stop()
    # With precreate, the 256 hex fan-out folders exist and are watched from the start.
    counter = OpenCounter(objects_dir=objects, on_open=on_open)
    assert counter.start()
    try:
        assert len(counter._marked) == 256 and (objects / "ff").is_dir()
        fresh = objects / "ee" / ("ee" + "1" * 30)
        temp = tmp_path / "cache" / "tmp" / "fresh.part"
        temp.write_bytes(b"q" * 3)
        os.rename(temp, fresh)  # as the store admits: written elsewhere, renamed in
        fresh.read_bytes()
        wait_until(lambda: seen["samples"] >= 6, timeout=10, what="an open in a precreated folder")
        assert seen["bytes"] == total + 3
    finally:
        counter.stop()


# ---------------------------------------------------------------------- epochfs status
def test_status_rates_render_and_watch(store: Store) -> None:
    import io

    from epochfs.sidecar import samplerlock, status

    for i in range(3):
        put(store, f"train/{i}.bin", 100)
    store.cut()
    store.count_skip(2)
    store.set_backpressure("cache full")
    store.set_meta(Meta.SIDECAR_TOTALS, json.dumps({"served_samples_total": 7, "served_bytes_total": 700}))
    lock = samplerlock.hold(store.root)  # a sampler runs: its backpressure is the state now
    try:
        doc = status.read_stats(cache=store.root, mount=None)
    finally:
        os.close(lock)
    assert doc["served_samples_total"] == 7 and doc["cache_bytes"] == 300
    text = status.render(doc)
    assert "[" + "#" * 12 in text and "300 B / 1000 B (30.0%)" in text
    assert "2 object(s) skipped" in text and "backpressure: YES" in text
    assert "served 7 sample opens" in text
    assert "     0         3" in text  # the epochs table
    assert "left out" in text and "left out: samples of the epoch before not in this one" in text

    later = dict(doc, fetched_bytes_total=doc["fetched_bytes_total"] + 2_000_000,
                 fetched_total=doc["fetched_total"] + 20, served_samples_total=17, evicted_total=0)
    r = status.rates(doc, later, 2.0)
    assert r["fetch MB/s"] == 1.0 and r["fetch samples/s"] == 10 and r["serve samples/s"] == 5
    assert status.rates(later, doc, 2.0)["fetch MB/s"] == 0  # a reset never shows a negative rate

    readings = iter([doc, later])
    ticks = iter([0.0, 2.0])
    out = io.StringIO()
    status.watch_view(lambda: next(readings), interval=2.0, out=out, iterations=2,
                      clock=lambda: next(ticks), sleep=lambda s: None)
    frames = out.getvalue().split(status.CLEAR)[1:]
    assert len(frames) == 2 and "rates:" not in frames[0]
    assert "fetch 976.6 KiB/s" in frames[1] and "serve samples/s 5.0" in frames[1]


def test_status_cli_on_a_cache_without_sidecar(store: Store) -> None:
    put(store, "train/a.bin", 100)
    cmd = [sys.executable, "-m", "epochfs.sidecar.cli", "status", "--cache", str(store.root)]
    doc = json.loads(subprocess.run([*cmd, "--json"], capture_output=True, text=True, check=True).stdout)
    assert doc["samples"] == 1 and doc["cache_bytes"] == 100
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert "(no epoch cut yet: epoch 0: 1/1 samples cached" in text and "errors: 0 object(s) skipped" in text
    bad = subprocess.run([*cmd, "--interval", "0", "--watch"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--interval" in bad.stderr


def test_status_says_how_far_epoch_0_is(store: Store) -> None:
    """Before the first cut, status gives the target, the progress and, with two readings, an
    estimate (issue 21, "the way to epoch 0"); rates in units that fit."""
    from epochfs.sidecar import status
    from epochfs.sidecar.store import Policy

    store.configure(Policy(capacity=10_000, min_samples=200))
    for i in range(54):
        put(store, f"train/{i}.bin", 10)
    doc = status.read_stats(cache=store.root, mount=None)
    assert doc["first_epoch"] == {"samples": 54, "target": 200, "epoch": 0}
    assert "(no epoch cut yet: epoch 0: 54/200 samples cached (27%))" in status.render(doc)
    later = dict(doc, fetched_total=doc["fetched_total"] + 20,
                 fetched_bytes_total=doc["fetched_bytes_total"] + 2048)
    text = status.render(later, status.rates(doc, later, 2.0))
    assert "epoch 0: 54/200 samples cached (27%), ~15 s at 10.0 samples/s (1.0 KiB/s)" in text
    assert "fetch 1.0 KiB/s" in text
    store.cut(force=True)
    assert status.read_stats(cache=store.root, mount=None)["first_epoch"] is None
