"""Dead children's metric files cost what they hold, their counters stay exact, and the sampler's
word on a pause reaches ``/metrics`` without the index.

Before: each child allocated 128 KiB per counter and histogram file up front (so that a full volume
is no SIGBUS), and a dead child's files stayed whole until the supervisor restarted: 256 KiB of the
cache's volume per restart (28 restarts: 7.5 MiB). And ``epochfs_disk_full`` and
``epochfs_backpressure`` came from the index alone, which a volume filled to its last byte does not
let the sampler write: 0 for as long as it stayed full.

Real child processes (the supervisor's child boot's first step, :func:`metrics_files.reserve`, then
prometheus-client in multiprocess mode), the real registry the sidecar serves, a real store.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from epochfs.sidecar import metrics, metrics_files
from epochfs.sidecar.store import Policy, Store

ENV = {k: v for k, v in os.environ.items() if not k.startswith(("EPOCHFS_", "PROMETHEUS_"))}
PAGE = os.sysconf("SC_PAGE_SIZE")

CHILD = """
import os, sys
from epochfs.sidecar import metrics_files
assert metrics_files.reserve() is None
from epochfs.sidecar.metrics import process_metrics
from epochfs.fuse.metrics import FUSE_OPS, fuse_metrics
n = int(sys.argv[1])
m = process_metrics()
for _ in range(n):
    m.remote_retried()
    m.observe_fetch(0.01 * n)
m.remote_failed()
f = fuse_metrics()
for op in FUSE_OPS:
    f.request(op, n)
if sys.argv[2] != "-":
    from epochfs.sidecar.metrics_sampler import pause_gauges
    pause_gauges().show(sys.argv[2])
print(os.getpid())
"""


def run_child(mpdir: Path, n: int, pause: str = "-") -> int:
    """One child's life: its metrics counted ``n`` times (and its pause shown), then its exit."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(n), pause], check=True, capture_output=True,
                         text=True, env={**ENV, metrics_files.ENV: str(mpdir)})
    return int(out.stdout.strip())


Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def series(registry: CollectorRegistry) -> Series:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(generate_latest(registry).decode())
            for s in family.samples}


def counted(values: Series) -> Series:
    """The counters' and histograms' series (what a restart must never lower)."""
    return {k: v for k, v in values.items()
            if k[0].endswith(("_total", "_bucket", "_count", "_sum")) and not k[0].startswith("process_")}


@pytest.fixture
def store(tmp_path: Path) -> Store:
    s = Store(tmp_path / "cache", create=True)
    s.configure(Policy(capacity=1000, keep_epochs=1, headroom=0.0))
    return s


def test_dead_children_s_files_shrink_to_what_they_hold_and_every_total_stays(
        tmp_path: Path, store: Store) -> None:
    mpdir = metrics.prepare_multiproc_dir(tmp_path / "mp")
    registry = metrics.sidecar_registry(stats=store.stats, multiproc_dir=mpdir,
                                        sidecar=metrics.SidecarMetrics(registry=CollectorRegistry()))
    previous: Series = {}
    for n in range(1, 7):  # six lives of a crash-looping child
        pid = run_child(mpdir, n)
        before = counted(series(registry))
        assert before[("epochfs_remote_objects_total", (("result", "retried"),))] == sum(range(1, n + 1))
        metrics.forget_process(pid, mpdir)  # what the supervisor does at its reaping
        after = counted(series(registry))
        assert after == before, "forgetting a dead child changes no counter"
        assert all(after[k] >= v for k, v in previous.items()), "no counter went down across restarts"
        previous = after
        for name in metrics_files.file_names(pid):
            path = mpdir / name
            if not path.exists():  # its live gauges: dropped
                assert name.startswith("gauge_live"), name
                continue
            used = int.from_bytes(path.read_bytes()[:4], "little")
            allocated = path.stat().st_blocks * 512
            assert path.stat().st_size == used, (name, path.stat().st_size, used)
            assert allocated <= -(-used // PAGE) * PAGE < metrics_files.RESERVED, (name, allocated, used)
    dead = sum(p.stat().st_blocks * 512 for p in mpdir.glob("*.db"))
    assert dead < 2 * metrics_files.RESERVED, f"six dead children take {dead} bytes"
    assert previous[("epochfs_remote_fetch_seconds_count", ())] == sum(range(1, 7))
    assert previous[("epochfs_remote_objects_total", (("result", "failed"),))] == 6


def test_a_file_without_values_and_a_foreign_header_are_kept_readable(tmp_path: Path) -> None:
    """A child killed before prometheus-client wrote its header (the file only allocated) keeps
    an empty readable file; one whose header says more than the file holds is left alone."""
    mpdir = metrics.prepare_multiproc_dir(tmp_path / "mp")
    assert metrics_files.reserve({metrics_files.ENV: str(mpdir)}, pid=4242) is None
    odd = mpdir / "histogram_4242.db"
    odd.write_bytes((1 << 30).to_bytes(4, "little") + b"\0" * 60)
    metrics.forget_process(4242, mpdir)
    assert (mpdir / "counter_4242.db").stat().st_size == 8
    assert odd.stat().st_size == 64
    odd.unlink()
    assert list(metrics.multiprocess_collector(mpdir).collect()) == []


def test_the_sampler_s_pause_reaches_metrics_without_the_index(tmp_path: Path, store: Store) -> None:
    """The sampler's gauges say "disk full" while the index cannot; the two sources give one
    value (either one's 1, never 2); a dead sampler's word is dropped, the index's stays."""
    mpdir = metrics.prepare_multiproc_dir(tmp_path / "mp")
    registry = metrics.sidecar_registry(stats=store.stats, multiproc_dir=mpdir,
                                        sidecar=metrics.SidecarMetrics(registry=CollectorRegistry()))
    flags = ("epochfs_backpressure", "epochfs_disk_full")

    def shown() -> tuple[float, ...]:
        values = series(registry)
        return tuple(values[(name, ())] for name in flags)

    assert shown() == (0, 0)
    pid = run_child(mpdir, 1, pause="disk full")  # the index was never told (a full volume)
    assert store.stats().backpressure_reason is None
    assert shown() == (1, 1)
    store.set_backpressure("disk full")  # once it could be written
    assert shown() == (1, 1)
    text = generate_latest(registry).decode()
    assert text.count("# TYPE epochfs_disk_full gauge") == 1
    metrics.forget_process(pid, mpdir)
    assert shown() == (1, 1), "the index's record outlives the sampler"
    store.set_backpressure(None)
    assert shown() == (0, 0)
    run_child(mpdir, 1, pause="cache full")
    assert shown() == (1, 0)
