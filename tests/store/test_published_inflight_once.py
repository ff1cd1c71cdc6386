"""What the sampler publishes for status and the metrics counts an admitted sample's bytes once:
``cache_bytes + inflight_bytes <= capacity`` in every reading (records.CacheStats). The fetch loop
publishes the bytes in flight on its own clock, so a publish may land between an admission's
commit (its bytes in the cache's total) and the admitter's bookkeeping after it; the published
figure then counted those bytes in both, and a full cache read as over its budget (seen as a
flaky ``test_capacity_never_exceeded_while_sampling`` under load)."""

from __future__ import annotations

from pathlib import Path

from store_helpers import sid_of
from test_reservations_total import _download

from epochfs.sidecar.reservations import Reservations
from epochfs.sidecar.store import Admission, CatalogRow, Policy, Store


class _PublishAfterCommit(Store):
    """A store whose admission, once committed, lets the fetch loop publish (what its clock may
    do at that moment): the admitter has not yet moved the bytes out of its admissions."""

    def __init__(self, root: Path, *, create: bool) -> None:
        super().__init__(root, create=create)
        self.reservations: Reservations | None = None
        self.readings: list[tuple[int, int]] = []

    def admit(self, items: list[Admission], *, inflight_bytes: int | None = None) -> int:
        added = super().admit(items, inflight_bytes=inflight_bytes)
        assert self.reservations is not None
        self.reservations.publish()
        stats = self.stats()
        self.readings.append((stats.cache_bytes, stats.inflight_bytes))
        return added


def test_a_publish_between_a_commit_and_its_bookkeeping_counts_the_bytes_once(tmp_path: Path) -> None:
    capacity = 1000
    store = _PublishAfterCommit(tmp_path / "cache", create=True)
    store.configure(Policy(capacity=capacity, keep_epochs=2, headroom=0.5))
    store.add_catalog([CatalogRow(k, sid_of(k), 250, "v1", i) for i, k in enumerate("abcd")])
    r = Reservations(store)
    store.reservations = r
    for _ in "abcd":
        assert r.reserve(250)
    r.admit([_download(store, "a", 250), _download(store, "b", 250)])
    r.admit([_download(store, "c", 250), _download(store, "d", 250)])
    assert store.readings == [(500, 500), (1000, 0)], store.readings
    r.publish()
    stats = store.stats()
    assert (stats.cache_bytes, stats.inflight_bytes) == (1000, 0)
