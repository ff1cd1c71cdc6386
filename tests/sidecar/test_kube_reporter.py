"""sidecar/kube/ against a fake Kubernetes API server on 127.0.0.1 (tests/kube_fake_api.py).

The server checks every request (token, path, verb, content type, body validated against the
Kubernetes 1.29 schema in strict mode); a fake clock drives rate limits and intervals, so nothing
here waits on wall-clock time except the injected request timeouts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import free_port, wait_until
from kube_fake_api import FakeApiServer
from kubernetes import client as k8s

from epochfs.sidecar import config, kube


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


STATS = {
    "cache_bytes": 750, "capacity_bytes": 1000, "samples": 12, "inflight_bytes": 0, "backpressure": False,
    "catalog_objects": 100, "pending_cuts": [], "epochs": [{"epoch": 3}], "latest_epoch": 3,
}


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    try:
        yield server
    finally:
        server.stop()
    assert server.protocol_errors == []


def make_reporter(api: FakeApiServer, clock: FakeClock, **kwargs) -> kube.KubeReporter:
    cfg = k8s.Configuration(host=api.url)
    cfg.api_key["BearerToken"] = f"bearer {api.token}"
    cfg.retries = 0
    # A request the fake API server answers must never meet the timeout: 2 s did once under the
    # loaded suite (the patch answered 200, after the reporter had given up and the test had
    # looked). Only the tests of a hanging server want it short, and they set their own.
    kwargs.setdefault("request_timeout", 30.0)
    return kube.KubeReporter(
        api_client=k8s.ApiClient(cfg),
        pod=kube.PodRef(name=api.pod_name, namespace=api.namespace, uid=api.pod_uid, node="node-1"),
        mount="/mnt/epochfs", clock=clock, **kwargs,
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_cut_creates_an_event_then_aggregates_into_it(api: FakeApiServer, clock: FakeClock) -> None:
    r = make_reporter(api, clock)
    r.on_cut(0, 10)
    r.flush()
    assert [v for v, _ in api.calls()] == ["POST"]
    ev = api.event("EpochCut")
    assert ev["type"] == "Normal" and ev["count"] == 1 and ev["message"] == "cut epoch 0 with 10 samples"
    assert ev["involvedObject"]["uid"] == api.pod_uid and ev["source"]["host"] == "node-1"
    r.on_cut(1, 25)
    r.on_cut(2, 40)
    r.flush()
    assert [v for v, _ in api.calls()] == ["POST", "PATCH"]
    ev = api.event("EpochCut")
    assert ev["count"] == 3 and ev["message"] == "cut epoch 2 with 40 samples"
    assert api.calls()[1][1] == f"/api/v1/namespaces/{api.namespace}/events/{ev['metadata']['name']}"
    assert api.requests[1].content_type == kube.MERGE_PATCH
    r.flush()  # nothing pending: no request
    assert len(api.requests) == 2


def test_a_burst_is_rate_limited_and_nothing_is_lost(api: FakeApiServer, clock: FakeClock) -> None:
    r = make_reporter(api, clock, burst=3, refill_seconds=30)
    for epoch in range(200):  # a cut per flush, far faster than the bucket refills
        r.on_cut(epoch, epoch * 10)
        r.flush()
        clock.advance(0.1)
    assert len(api.requests) == 3  # the burst, then the bucket is empty
    assert api.event("EpochCut")["count"] == 3
    clock.advance(30)
    r.flush()
    assert len(api.requests) == 4
    ev = api.event("EpochCut")
    assert ev["count"] == 200 and ev["message"] == "cut epoch 199 with 1990 samples"


def test_backpressure_reports_changes_only(api: FakeApiServer, clock: FakeClock) -> None:
    r = make_reporter(api, clock)
    r.on_backpressure(False)
    r.flush()
    assert api.requests == []
    r.on_backpressure(True, "cache full")
    r.on_backpressure(True, "cache full")
    r.flush()
    assert api.event("BackpressureStarted")["type"] == "Normal"
    assert api.event("BackpressureStarted")["count"] == 1
    r.on_backpressure(False)
    r.flush()
    assert api.event("BackpressureEnded")["type"] == "Normal"
    r.on_backpressure(True, "cache full")
    r.flush()
    assert api.event("BackpressureStarted")["count"] == 2


def test_a_paused_folder_view_is_a_disk_full_warning_and_its_end_an_event(
        api: FakeApiServer, clock: FakeClock) -> None:
    r = make_reporter(api, clock)
    r.on_publish_paused(None)
    r.flush()
    assert api.requests == []
    r.on_publish_paused("the folder view's volume is full (No space left on device: /data/view)")
    r.on_publish_paused("the folder view's volume is full (No space left on device: /data/view)")
    r.flush()
    event = api.event("PublishPaused")
    assert event["type"] == "Warning" and event["count"] == 1 and "disk full" in event["message"]
    r.on_publish_paused(None)
    r.flush()
    assert api.event("PublishResumed")["type"] == "Normal"


def test_remote_errors_warn_over_the_threshold_once_a_window(api: FakeApiServer, clock: FakeClock) -> None:
    r = make_reporter(api, clock, error_threshold=5, error_window=60)
    r.on_remote_errors(2)
    clock.advance(10)
    r.on_remote_errors(2)
    r.flush()
    assert api.requests == []  # 4 < 5
    r.on_remote_errors(1)
    r.flush()
    ev = api.event("RemoteErrors")
    assert ev["type"] == "Warning" and ev["message"].startswith("5 remote errors in the last 60s")
    for _ in range(50):  # a failing remote keeps failing: still one occurrence per window
        clock.advance(0.5)
        r.on_remote_errors(3)
    r.flush()
    assert api.event("RemoteErrors")["count"] == 1 and len(api.requests) == 1
    clock.advance(60)
    r.on_remote_errors(1)  # old errors left the window: 1 < 5
    r.flush()
    assert len(api.requests) == 1
    r.on_remote_errors(9)
    r.flush()
    assert api.event("RemoteErrors")["count"] == 2


def test_remount_is_a_warning(api: FakeApiServer, clock: FakeClock) -> None:
    r = make_reporter(api, clock)
    r.on_remount()
    r.flush()
    ev = api.event("Remounted")
    assert ev["type"] == "Warning" and "/mnt/epochfs" in ev["message"]


def test_status_annotation_is_patched_and_throttled(api: FakeApiServer, clock: FakeClock) -> None:
    r = make_reporter(api, clock, status_interval=30)
    r.update_status(STATS)
    r.flush()
    note = api.annotation()
    assert note is not None
    assert (note["latestEpoch"], note["samples"], note["occupancy"]) == (3, 12, 0.75)
    assert note["capacityBytes"] == 1000 and note["backpressure"] is False and note["updated"]
    # A merge patch: the pod's other annotations stay.
    assert api.pod["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] == "trainer"
    assert api.requests[0].content_type == kube.MERGE_PATCH
    for n in range(20):  # many updates within the interval: no request
        r.update_status({**STATS, "samples": 13 + n, "latest_epoch": 4})
        r.flush()
        clock.advance(1)
    assert len(api.requests) == 1
    clock.advance(10)
    r.flush()
    assert len(api.requests) == 2
    assert api.annotation()["samples"] == 32 and api.annotation()["latestEpoch"] == 4
    clock.advance(60)
    r.update_status({**STATS, "samples": 32, "latest_epoch": 4})  # unchanged: no request
    r.flush()
    assert len(api.requests) == 2


@pytest.mark.parametrize("fault", [403, 409, 429, 500, 503, "hang"])
def test_every_api_error_is_survived(api: FakeApiServer, clock: FakeClock, fault: int | str) -> None:
    # A hang costs the timeout three times, so it is short there; a request that does not hang must
    # never meet it on a loaded machine (0.5 s for every fault timed a good request out in a run).
    r = make_reporter(api, clock, request_timeout=1.5 if fault == "hang" else 30)
    # A failing create.
    api.fail_next(fault)
    r.on_cut(0, 10)
    r.flush()  # must not raise
    assert api.events == {}
    assert sum(r.stats.failed.values()) == 1
    clock.advance(10)  # past any back-off (429 asks for 7 s)
    r.flush()
    assert api.event("EpochCut")["count"] == 1
    creates = [q for q in api.requests if q.verb == "POST"]
    if fault == 409:
        assert creates[0].body["metadata"]["name"] != creates[-1].body["metadata"]["name"]
    # A failing patch, then a failing annotation: both delivered later, nothing lost.
    api.fail_next(fault, fault)
    r.on_cut(1, 20)
    r.update_status(STATS)
    r.flush()
    r.flush(force_status=True)
    clock.advance(40)
    r.flush()
    assert api.event("EpochCut")["count"] == 2
    assert api.annotation()["samples"] == 12


def test_back_off_after_429_honours_retry_after(api: FakeApiServer, clock: FakeClock) -> None:
    r = make_reporter(api, clock)
    api.fail_next(429)
    r.on_cut(0, 1)
    r.flush()
    clock.advance(6)
    r.flush()
    assert len(api.requests) == 1  # Retry-After: 7
    clock.advance(1)
    r.flush()
    assert api.event("EpochCut")["count"] == 1


def test_an_expired_event_is_created_again_with_the_whole_count(api: FakeApiServer, clock: FakeClock) -> None:
    r = make_reporter(api, clock)
    r.on_cut(0, 1)
    r.flush()
    api.events.clear()  # the API server's event TTL passed
    r.on_cut(1, 2)
    r.flush()  # 404 on the patch
    r.flush()  # a new Event
    assert api.event("EpochCut")["count"] == 2


def test_an_unreachable_api_server_is_survived(clock: FakeClock, caplog: pytest.LogCaptureFixture) -> None:
    cfg = k8s.Configuration(host=f"http://127.0.0.1:{free_port()}")
    cfg.retries = 0
    r = kube.KubeReporter(api_client=k8s.ApiClient(cfg), pod=kube.PodRef(name="p", namespace="n"),
                          clock=clock, request_timeout=1.0)
    with caplog.at_level(logging.WARNING, logger="epochfs.kube"):
        for n in range(5):
            r.on_cut(n, n)
            r.update_status(STATS)
            r.flush(force_status=True)
            clock.advance(6)
    assert sum(r.stats.failed.values()) >= 5
    # Logged once per kind of failure, not once per request.
    assert len([rec for rec in caplog.records if "create event failed" in rec.getMessage()]) == 1


def test_calls_made_are_the_calls_the_role_grants(api: FakeApiServer, clock: FakeClock) -> None:
    r = make_reporter(api, clock)
    r.on_cut(0, 1)
    r.on_backpressure(True)
    r.on_remount()
    r.update_status(STATS)
    r.flush()
    r.on_cut(1, 2)
    r.on_remote_errors(100)
    r.flush()
    assert api.rbac_calls() == set(kube.API_CALLS)


def test_thread_sends_and_close_flushes(api: FakeApiServer) -> None:
    r = make_reporter(api, FakeClock(), status_interval=3600)
    r.start()
    try:
        r.on_cut(0, 5)
        wait_until(lambda: api.events, what="EpochCut from the reporter thread")
        r.update_status(STATS)
        wait_until(lambda: api.annotation(), what="first status annotation")
        r.update_status({**STATS, "samples": 99})  # within the interval: only close() sends it
    finally:
        r.close()
    assert api.annotation()["samples"] == 99


def test_recording_never_waits_for_a_hanging_api_server(api: FakeApiServer) -> None:
    r = make_reporter(api, FakeClock(), request_timeout=1.0)
    api.fail_next(*["hang"] * 5)
    r.start()
    try:
        r.on_cut(0, 1)
        wait_until(lambda: r.stats.failed or api.requests, what="the first (hanging) request")
        started = time.monotonic()
        for n in range(2000):
            r.on_cut(n, n)
            r.on_remote_errors(1)
            r.update_status({**STATS, "samples": n})
        assert time.monotonic() - started < 3.0  # one blocking call would take 1 s, five hang queued
    finally:
        r.close(flush=False)


# --------------------------------------------------------------------------- from_environment


def test_outside_a_cluster_reporting_is_off_with_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="epochfs.kube"):
        r = kube.from_environment({}, service_account_dir=tmp_path)
    assert isinstance(r, kube.DisabledReporter) and not r.enabled
    lines = [rec.getMessage() for rec in caplog.records]
    assert len(lines) == 1 and "not running in a cluster" in lines[0]
    r.start()
    r.on_cut(0, 1)
    r.on_backpressure(True)
    r.on_remote_errors(5)
    r.on_remount()
    r.update_status(STATS)
    r.close()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="epochfs.kube"):
        r = kube.from_environment({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, reporting=False,
                                  service_account_dir=tmp_path)
    assert isinstance(r, kube.DisabledReporter)
    assert len(caplog.records) == 1 and "EPOCHFS_KUBE_REPORTING" in caplog.records[0].getMessage()


def _service_account(folder: Path, api: FakeApiServer) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "token").write_text(api.token)
    (folder / "namespace").write_text(api.namespace)
    assert api.ca_file is not None
    (folder / "ca.crt").write_bytes(api.ca_file.read_bytes())
    return folder


def test_in_cluster_configuration_over_tls(tmp_path: Path) -> None:
    """The real in-cluster path: token and CA files, KUBERNETES_SERVICE_HOST, HTTPS."""
    api = FakeApiServer(tls_dir=tmp_path / "tls").start()
    try:
        sa = _service_account(tmp_path / "sa", api)
        env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(api.port),
               "POD_NAME": api.pod_name, "POD_UID": api.pod_uid, "NODE_NAME": "node-7"}
        r = kube.from_environment(env, service_account_dir=sa, status_interval=5)
        assert isinstance(r, kube.KubeReporter)
        assert r.status_interval == 5 and r.pod.namespace == api.namespace  # namespace from the file
        r.on_cut(0, 7)
        r.update_status(STATS)
        r.flush()
        assert api.event("EpochCut")["source"]["host"] == "node-7"
        assert api.annotation()["samples"] == 12
        assert api.protocol_errors == []
        with pytest.raises(config.ConfigError, match=r"--kube-status-interval.*EPOCHFS_KUBE_STATUS_INTERVAL"):
            config.parse(config.SidecarSettings, ["--cache", str(tmp_path / "c"), "--mount", "/m",
                                                  "--remote", "s3://b"],
                         environ={"EPOCHFS_KUBE_STATUS_INTERVAL": "soon"})
        missing_pod = {k: v for k, v in env.items() if k != "POD_NAME"}
        assert isinstance(kube.from_environment(missing_pod, service_account_dir=sa), kube.DisabledReporter)
    finally:
        api.stop()


def test_a_wrong_ca_is_an_error_survived(tmp_path: Path) -> None:
    api = FakeApiServer(tls_dir=tmp_path / "tls").start()
    other = FakeApiServer(tls_dir=tmp_path / "other-tls")  # another CA, never started
    try:
        sa = _service_account(tmp_path / "sa", api)
        assert other.ca_file is not None
        (sa / "ca.crt").write_bytes(other.ca_file.read_bytes())
        env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(api.port),
               "POD_NAME": api.pod_name}
        r = kube.from_environment(env, service_account_dir=sa)
        assert isinstance(r, kube.KubeReporter)
        r.on_cut(0, 1)
        r.flush()
        assert sum(r.stats.failed.values()) == 1
        assert api.events == {}
    finally:
        api.stop()
        other._server.server_close()


def test_a_volume_that_holds_no_sample_is_named_in_the_backpressure_event(
        api: FakeApiServer, clock: FakeClock) -> None:
    """The sampler's "disk full: <why>" (a filesystem too small for any sample) is a disk-full
    Event with its why, not the full cache's "live epochs pin it", which sends the operator to the
    wrong place."""
    r = make_reporter(api, clock)
    why = "the cache's filesystem can hold no sample (0 B of --capacity 2.0 MiB)"
    r.on_backpressure(True, f"disk full: {why}")
    r.flush()
    message = api.event("BackpressureStarted")["message"]
    assert message.startswith(why), message
    assert "live epochs" not in message


def test_a_full_cache_before_the_next_cut_is_a_normal_event(api: FakeApiServer, clock: FakeClock) -> None:
    """Snapshot mode fills the headroom and waits for the next cut, every epoch, also before
    epoch 0 exists: docs/metrics.md calls backpressure alone normal. It was a Warning saying
    "nothing evictable (live epochs pin it)" on every healthy pod."""
    r = make_reporter(api, clock)
    r.on_backpressure(True, "cache full")  # what the sampler records (sampler/room.py)
    r.flush()
    ev = api.event("BackpressureStarted")
    assert ev["type"] == "Normal", ev
    assert ev["message"].startswith("the cache is full until the next cut frees room"), ev["message"]
    assert "pin" not in ev["message"]


def test_a_schedule_window_that_cannot_fit_is_a_warning_with_the_stores_reason(
        api: FakeApiServer, clock: FakeClock) -> None:
    """The store's own reason names the problem (no epoch is cut again): a Warning that says it,
    aggregated apart from the Normal Events of the same reason (client-go keys by type too)."""
    r = make_reporter(api, clock)
    r.on_backpressure(True, "cache full")
    r.on_backpressure(False)
    stuck = "cache full: epoch 4's window cannot fit beside the kept epochs (2-3)"
    r.on_backpressure(True, stuck)
    r.flush()
    started = {e["type"]: e for e in api.events.values() if e["reason"] == "BackpressureStarted"}
    assert set(started) == {"Normal", "Warning"}, started
    assert started["Warning"]["message"] == f"{stuck}: sampling paused"
    assert started["Normal"]["count"] == 1 and started["Warning"]["count"] == 1
    r.on_backpressure(False)
    r.on_backpressure(True, "disk full")
    r.flush()
    started = {e["type"]: e for e in api.events.values() if e["reason"] == "BackpressureStarted"}
    assert started["Warning"]["count"] == 2 and "filesystem is full" in started["Warning"]["message"]
