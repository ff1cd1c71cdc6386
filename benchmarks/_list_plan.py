"""The listing's cost in process: pages and CPU of a complete listing of a synthetic key space.

``python -m epochfs.benchmarks._list_plan equal:keys=100000,folders=100 many:keys=100000,folders=5000``
runs :class:`~epochfs.sidecar.listing.Lister` (4 listers) over :class:`._cached_seed.BucketRemote`
(the synthetic endpoint's pages without the network) for each key space (:mod:`._keyspaces`
specs) and prints the LIST pages asked and the CPU and wall seconds: what the planner's smaller
pages and its pages past a span's end cost against the same listing of another commit (run it
from a worktree of that commit with ``PYTHONPATH=<worktree>/src``).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from epochfs.benchmarks._cached_seed import BucketRemote
from epochfs.benchmarks._keyspaces import KeySpace, parse_spec
from epochfs.sidecar.listing import Lister
from epochfs.sidecar.listing.paged import PagedSource
from epochfs.sidecar.store import Store


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("specs", nargs="+", help="key spaces, e.g. equal:keys=100000,folders=100")
    p.add_argument("--threads", type=int, default=4)
    args = p.parse_args(argv)
    for spec in args.specs:
        remote = BucketRemote(KeySpace(parse_spec(spec)))
        with tempfile.TemporaryDirectory() as tmp:
            store = Store(Path(tmp) / "c", create=True)
            cpu, wall = time.process_time(), time.monotonic()
            report = Lister(store, PagedSource(remote), seed=0, threads=args.threads).run()
            cpu, wall = time.process_time() - cpu, time.monotonic() - wall
            store.close()
        print(f"{spec}: {remote.pages} pages, {report.total} keys, cpu {cpu:.2f}s, wall {wall:.2f}s")


if __name__ == "__main__":
    main()
