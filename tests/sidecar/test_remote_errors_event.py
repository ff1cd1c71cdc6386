"""The supervisor's RemoteErrors Warning counts downloads that kept failing, not keys skipped for
other reasons. Before: every skip fed it, so a listing that refused 40 hostile keys (or an object
too large for the volume) raised "40 remote errors in the last 60s ...; failing objects are retried,
then skipped" for objects never fetched. The real store, the real KubeReporter against the fake API
server, and the supervisor's own periodic tick."""

from __future__ import annotations

from pathlib import Path

from kube_fake_api import FakeApiServer
from prometheus_client import CollectorRegistry
from test_kube_reporter import FakeClock, api, make_reporter  # noqa: F401  (api: a fixture)

from epochfs.sidecar.metrics import SidecarMetrics
from epochfs.sidecar.store import Store
from epochfs.sidecar.supervisor.observability import Observability


class _Tick(Observability):
    """The supervisor's observability over one store and reporter (the tick reads nothing else)."""

    def __init__(self, store: Store, reporter: object) -> None:
        self._store, self._reporter = store, reporter  # type: ignore[assignment]
        self._metrics = SidecarMetrics(registry=CollectorRegistry())
        self._seen = {}


def test_only_failed_downloads_raise_the_remote_errors_warning(api: FakeApiServer, tmp_path: Path) -> None:  # noqa: F811
    reporter = make_reporter(api, FakeClock(), error_threshold=5, error_window=60)
    with Store(tmp_path / "cache", create=True) as store:
        tick = _Tick(store, reporter)
        tick._periodic()
        store.count_skip(40)  # keys the listing refused
        for i in range(3):
            store.mark_skipped(f"k{i}")  # an object too large for the volume
        tick._periodic()
        reporter.flush()
        assert [e for e in api.events.values() if e["reason"] == "RemoteErrors"] == []
        assert store.stats().skipped_total == 43 and store.stats().failed_total == 0
        for i in range(6):
            store.mark_skipped(f"f{i}", failed=True)
        tick._periodic()
        reporter.flush()
        event = api.event("RemoteErrors")
        assert event["type"] == "Warning" and event["message"].startswith("6 remote errors"), event
        assert store.stats().skipped_total == 49 and store.stats().failed_total == 6
