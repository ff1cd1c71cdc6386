"""A picture of the Grafana dashboard, drawn from a real Prometheus scraping a real sidecar (issue 21).

Not a measurement against a baseline like the other benchmarks: a run of the whole system whose
output is the dashboard's panels as they look, with the dashboard's own queries.

1. generates a small dataset on local disk (``--samples`` ``.npz`` files, a float32 array of
   ``--dim`` values and a learnable label each, as ``examples/demo.py``),
2. starts a real ``epochfs sidecar`` on it (``file://`` remote, a ``--capacity`` smaller than the
   dataset so the cache fills and then evicts, a ``--max-rate`` so its growth is visible),
3. starts a real Prometheus (Debian's ``prometheus``) scraping the sidecar's ``/metrics`` every
   ``--scrape-interval`` with the target labels ``namespace`` and ``pod`` that Kubernetes service
   discovery adds,
4. trains a small torch model for ``--seconds`` with ``EpochLoader`` over the mount (an epoch after
   another, each cut by the loader's lookup), reporting to the sidecar's ``/v1/client-report`` so the
   client-side metrics move too, then lets Prometheus scrape ``--tail`` seconds more,
5. reads every panel of the dashboard (a checkout's ``helm/epochfs/dashboards/epochfs.json``, or
   ``--dashboard``: an installed epochfs has no chart, so there the flag is needed),
   resolves its template variables as Grafana would (each query variable by its own
   ``label_values(...)`` query against this Prometheus; ``$__rate_interval`` as Grafana computes it:
   the larger of four scrape intervals and the step plus one scrape interval), and sends each
   panel's targets (``expr``) to Prometheus's range API (``/api/v1/query_range``) over the run,
6. draws one PNG with matplotlib (Agg): the panels where the dashboard places them (``gridPos``),
   each titled with the panel's title, one line per series (labelled by the target's
   ``legendFormat``), y axes in the panel's unit; stat and gauge panels as their last value in big
   text. x: seconds since the sidecar started.

A panel without data is a finding: the run prints which, and why (a metric Prometheus never scraped
from the sidecar, a label selector that matches no series, only NaN from a quantile of empty
buckets), and ``--summary FILE`` writes every panel and target with its series and points as JSON.
The sidecar and Prometheus are always stopped (SIGTERM; the sidecar unmounts) and the scratch folder
removed, on errors, SIGTERM and Ctrl-C too. Needs root and /dev/fuse (the mount), the ``prometheus``
program (Debian package) and matplotlib (``pip install 'epochfs[bench]'``).

    epochfs bench dashboard --args --out docs/dashboard.png                       # ~2 minutes
    python -m epochfs.benchmarks.dashboard --samples 600 --seconds 8 --out /tmp/d.png --summary /tmp/d.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from epochfs.benchmarks import harness
from epochfs.benchmarks._dashboard_draw import draw
from epochfs.benchmarks._dashboard_panels import Panel, query_panels
from epochfs.benchmarks._dashboard_queries import (
    Prometheus,
    duration,
    grafana_rate_interval,
    resolve_variables,
)

NAMESPACE, POD = "bench", "trainer-0"
"""The target labels the scrape config gives the sidecar (Kubernetes service discovery's)."""


# ---------------------------------------------------------------------------------- the dashboard
CHART_DASHBOARD = "helm/epochfs/dashboards/epochfs.json"
"""Where the dashboard lives in the epochfs repository (the Helm chart's file)."""


def default_dashboard() -> Path:
    """The chart's dashboard in this checkout (benchmarks/ sits beside helm/)."""
    return Path(__file__).resolve().parent.parent / CHART_DASHBOARD


def missing_dashboard(path: Path, *, given: bool) -> str:
    """Why ``path`` cannot be read, and the flag that fixes it.

    Why: the wheel ships the Python packages, not the chart, so from an installed epochfs the
    default (beside ``benchmarks/`` in a checkout) is never there; "no dashboard at <site-packages
    path>" named neither ``--dashboard`` nor where the file is to be found."""
    where = (f"the dashboard is {CHART_DASHBOARD} in the epochfs repository (a checkout, or the "
             "Helm chart's files)")
    if given:
        return f"--dashboard: no file at {path}; {where}"
    return (f"no dashboard at {path}: the installed epochfs holds no Helm chart (only a checkout has "
            f"it beside benchmarks/); pass --dashboard PATH, where {where}")


# ---------------------------------------------------------------------------------- the run
def generate_dataset(root: Path, count: int, dim: int, *, seed: int = 0) -> int:
    """``count`` samples ``train/NNNNN.npz`` (``x``: random float32, ``y``: a learnable label); bytes."""
    rng = np.random.default_rng(seed)
    direction = rng.standard_normal(dim).astype(np.float32)
    (root / "train").mkdir(parents=True, exist_ok=True)
    total = 0
    for i in range(count):
        x = rng.standard_normal(dim).astype(np.float32)
        path = root / "train" / f"{i:05d}.npz"
        np.savez(path, x=x, y=np.int64(x @ direction > 0))
        total += path.stat().st_size
    return total


@contextlib.contextmanager
def process(cmd: Sequence[str], *, what: str, url: str, log: Path, timeout: float = 60.0,
            unmount: Sequence[Path] = (),
            env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """``cmd`` in a session of its own (Ctrl-C reaches this program only, which then stops it with one
    SIGTERM: a second signal would make the sidecar exit at once), ready when ``url`` answers 200;
    stopped by :func:`harness.stop` after the block, whatever happens in it."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        harness.wait_ready(proc, lambda: harness.answers(url), what=what, timeout=timeout, interval=0.1,
                           log=log)
        yield proc
    finally:
        harness.stop(proc, timeout=30.0, unmount=unmount)


def prometheus_config(path: Path, target: str, scrape: float) -> None:
    interval = duration(scrape)
    path.write_text(
        f"global:\n  scrape_interval: {interval}\n  evaluation_interval: {interval}\n"
        f"scrape_configs:\n  - job_name: epochfs\n    scrape_timeout: {duration(scrape * 0.9)}\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
        f"        labels: {{namespace: {NAMESPACE}, pod: {POD}}}\n")


@dataclass
class Workload:
    epochs: int = 0
    samples: int = 0
    seconds: float = 0.0
    first_loss: float = math.nan
    last_loss: float = math.nan
    epoch_files: list[int] = field(default_factory=list)


def import_torch() -> Any:
    try:
        import torch

        import epochfs.torchclient  # noqa: F401  (torch's DataLoader and the client, imported once)
    except ModuleNotFoundError as e:
        harness.missing_module(e)
    return torch


def train(mount: Path, ns: argparse.Namespace) -> Workload:
    """Epoch after epoch through the mount until ``--seconds`` have passed (the last epoch finishes)."""
    torch = import_torch()
    from epochfs.torchclient import EpochLoader

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(ns.dim, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = EpochLoader(mount, batch_size=ns.batch_size, num_workers=ns.workers, decode="npz", progress=None)
    done = Workload()
    started = time.monotonic()
    try:
        while time.monotonic() - started < ns.seconds:
            losses = []
            for batch in loader.epoch(done.epochs):
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])
                loss.backward()
                optimizer.step()
                losses.append(float(loss.item()))
                if ns.step_ms:
                    time.sleep(ns.step_ms / 1000)  # the rest of a training step (a GPU's share)
            stats = loader.history[-1]
            done.epoch_files.append(stats.files)
            done.samples += stats.samples
            loss_mean = sum(losses) / max(1, len(losses))
            if done.epochs == 0:
                done.first_loss = loss_mean
            done.last_loss = loss_mean
            print(f"  epoch {done.epochs}: {stats.files} samples, {stats.mb_per_s:.1f} MB/s, waited "
                  f"{stats.wait_seconds:.2f} s, loss {loss_mean:.3f}", file=sys.stderr, flush=True)
            done.epochs += 1
    finally:
        loader.close()  # the workers stopped, the reporter's last increments sent
    done.seconds = time.monotonic() - started
    return done


def run(ns: argparse.Namespace, folder: Path) -> tuple[list[Panel], dict[str, Any]]:
    """The sidecar, Prometheus and the workload; the panels queried before anything stops."""
    prometheus_bin = ns.prometheus
    doc = json.loads(ns.dashboard.read_text())
    remote, cache, mount = folder / "remote", folder / "cache", folder / "mnt"
    mount.mkdir()
    print(f"dashboard: generating {ns.samples} samples under {remote}", file=sys.stderr, flush=True)
    dataset_bytes = generate_dataset(remote, ns.samples, ns.dim)
    port, prom_port = harness.free_port(), harness.free_port()
    sidecar_cmd = [*harness.EPOCHFS, "--log-level", "INFO", "sidecar", "--remote", f"file://{Path(remote).resolve()}",
                   "--cache", str(cache), "--mount", str(mount), "--health-port", str(port),
                   "--capacity", ns.capacity, "--max-rate", ns.max_rate, "--min-samples", "64",
                   "--concurrency", "8", "--in-use-seconds", "0", *ns.sidecar_arg]
    config = folder / "prometheus.yml"
    prometheus_config(config, f"127.0.0.1:{port}", ns.scrape_interval)
    prom_cmd = [prometheus_bin, f"--config.file={config}", f"--storage.tsdb.path={folder / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"]
    prom = Prometheus(f"http://127.0.0.1:{prom_port}")
    # The client's reports reach this sidecar (the loader reads the URL when it is made).
    os.environ["EPOCHFS_REPORT_URL"] = f"http://127.0.0.1:{port}/v1/client-report"
    import_torch()  # its first import takes seconds: before the sidecar starts sampling
    prom_log = folder / "prometheus.log"
    with process(prom_cmd, what="prometheus", url=prom.base + "/-/ready", log=prom_log) as prom_proc:
        # Its first scrape (of nothing yet) a few seconds after it is ready (service discovery's
        # first update): the sidecar starts after it, so the pictures begin with an empty cache.
        harness.wait_ready(prom_proc, prom.has_scraped, what="prometheus's first scrape", timeout=60,
                           interval=0.2, log=prom_log)
        origin = time.time()
        with process(sidecar_cmd, what="epochfs sidecar", url=f"http://127.0.0.1:{port}/readyz",
                     log=folder / "sidecar.log", unmount=[mount]):
            panels, meta = observe(ns, doc, prom, mount, origin)
    meta.update({"samples": ns.samples, "dataset_bytes": dataset_bytes, "capacity": ns.capacity,
                 "max_rate": ns.max_rate})
    return panels, meta


def observe(ns: argparse.Namespace, doc: dict[str, Any], prom: Prometheus, mount: Path,
            origin: float) -> tuple[list[Panel], dict[str, Any]]:
    """The workload on the running sidecar, then every panel queried over the run."""
    # Epoch 0 cut now, small (the sampler has just begun), so the growth shows.
    (mount / "epoch-0").is_dir()
    print(f"dashboard: sidecar and prometheus up; training for {ns.seconds:g} s", file=sys.stderr, flush=True)
    workload = train(mount, ns)
    time.sleep(ns.tail)
    end = time.time()
    # The last scrape in the database before anything stops (a scrape is at most one interval away).
    time.sleep(ns.scrape_interval)
    step = ns.step or ns.scrape_interval
    span = end - origin
    builtins = {"__rate_interval": duration(grafana_rate_interval(ns.scrape_interval, step)),
                "__interval": duration(step), "__interval_ms": str(round(step * 1000)),
                "__range": duration(span), "__range_s": str(round(span)),
                "__range_ms": str(round(span * 1000))}
    variables = {**resolve_variables(doc, prom, origin, end), **builtins}
    panels = query_panels(doc, prom, start=origin, end=end, step=step, origin=origin, variables=variables)
    meta = {"dashboard": str(ns.dashboard), "span_s": round(span, 1), "step": duration(step),
            "scrape_interval": duration(ns.scrape_interval), "scrapes": prom.count_scrapes(end),
            "variables": variables, "workload": asdict(workload)}
    return panels, meta


def report(panels: list[Panel]) -> list[str]:
    lines = []
    width = max((len(p.title) for p in panels), default=5)
    for p in panels:
        count = len(p.data_series)
        lines.append(f"  {p.title:<{width}}  {count:3d} series" + ("" if p.has_data else "  NO DATA"))
        for t in p.targets:
            if not t.has_data:
                lines.append(f"      no data: {t.query}\n        why: {t.why_empty}")
    return lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="python -m epochfs.benchmarks.dashboard", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path("dashboard.png"), help="the PNG (dashboard.png)")
    p.add_argument("--summary", type=Path, help="write every panel, target and series (counts) here as JSON")
    p.add_argument("--dashboard", type=Path,
                   help=f"the Grafana dashboard JSON (default: the chart's, {CHART_DASHBOARD} of a "
                   "checkout; needed from an installed epochfs, which has no chart)")
    p.add_argument("--samples", type=int, default=8000, help="samples in the generated dataset (8000)")
    p.add_argument("--dim", type=int, default=1024, help="float32 values per sample (1024: ~4.3 KB files)")
    p.add_argument("--capacity", default="12Mi", help="the sidecar's --capacity (12Mi, about a third of "
                   "the default dataset: it fills, then evicts)")
    p.add_argument("--max-rate", default="512Ki", help="the sidecar's --max-rate (512Ki: the cache fills "
                   "in about 25 s)")
    p.add_argument("--seconds", type=float, default=90.0, help="seconds of training (90)")
    p.add_argument("--tail", type=float, default=5.0, help="seconds scraped after training (5)")
    p.add_argument("--scrape-interval", type=float, default=1.0, help="Prometheus's, in seconds (1)")
    p.add_argument("--step", type=float, help="query_range step in seconds (default: the scrape interval)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--workers", type=int, default=2, help="EpochLoader's worker processes (2)")
    p.add_argument("--step-ms", type=float, default=20.0,
                   help="milliseconds each training step sleeps besides the model (20; a GPU's share)")
    p.add_argument("--sidecar-arg", action="append", default=[], metavar="FLAG",
                   help="one more flag for the sidecar, e.g. --sidecar-arg=--cut-interval=5 (repeatable)")
    p.add_argument("--width", type=float, default=16.0, help="figure width in inches (16)")
    p.add_argument("--dpi", type=int, default=80, help="dots per inch (80)")
    p.add_argument("--dir", type=Path, help=harness.DIR_HELP + " (default: the system's temp folder)")
    ns = p.parse_args(argv)
    if ns.samples < 64 or ns.seconds <= 0 or ns.scrape_interval <= 0:
        p.error("--samples must be at least 64 (the sidecar's --min-samples), --seconds and "
                "--scrape-interval positive")
    given = ns.dashboard is not None
    ns.dashboard = ns.dashboard if given else default_dashboard()
    if not ns.dashboard.is_file():
        p.error(missing_dashboard(ns.dashboard, given=given))
    harness.require("matplotlib", "torch", "mfusepy")
    if not Path("/dev/fuse").exists() or os.geteuid() != 0:
        harness.fail("needs root and /dev/fuse (the sidecar mounts its FUSE view)")
    ns.prometheus = harness.program("prometheus")
    try:
        harness.clean_up_on_sigterm()  # SIGTERM and Ctrl-C raise KeyboardInterrupt: the clean-up below runs
        with harness.work_dir(ns.dir, prefix="epochfs-dashboard-") as folder:
            panels, meta = run(ns, folder)
    except KeyboardInterrupt:
        print("dashboard: interrupted; the sidecar and prometheus stopped, scratch removed", file=sys.stderr)
        return 130
    w = meta["workload"]
    mib = meta["dataset_bytes"] / 2**20
    title = (f"epochfs dashboard: a real sidecar ({ns.samples} samples, {mib:.0f} MiB "
             f"file:// remote, --capacity {ns.capacity}, --max-rate {ns.max_rate}) under EpochLoader "
             f"({w['epochs']} epochs), scraped by Prometheus every {meta['scrape_interval']}; "
             f"$__rate_interval = {meta['variables']['__rate_interval']}")
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    draw(panels, ns.out, title=title, span=meta["span_s"], width=ns.width, dpi=ns.dpi)
    empty = [p.title for p in panels if not p.has_data]
    print(f"dashboard: {len(panels)} panels over {meta['span_s']:.0f} s ({meta['scrapes']} scrapes), "
          f"{w['epochs']} epochs trained, {w['samples']} samples delivered")
    print("\n".join(report(panels)))
    print(f"panels without data: {', '.join(empty) if empty else 'none'}")
    print(f"wrote {ns.out} ({ns.out.stat().st_size / 1000:.0f} kB)")
    if ns.summary:
        ns.summary.parent.mkdir(parents=True, exist_ok=True)
        ns.summary.write_text(json.dumps({**meta, "out": str(ns.out), "panels_without_data": empty,
                                          "panels": [p.summary() for p in panels]}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
