"""The fetch benchmark's ``download-path`` tool: epochfs's download path in a fresh process, with
nothing of the sampler around it.

A process that imports only what a download needs (the S3 remote, the store's temp files, the
:class:`~epochfs.sidecar.download.Downloader`), lists the bucket once and fetches every object on
``--concurrency`` threads, each one verified against its stored checksum and fsynced as the
sampler does it, then moved into ``--dest`` (so the benchmark counts its files as another tool's).
No index, fetch order, admission, listing process or metrics.

Timed from its process start to its exit, like s5cmd and rclone, it is the most ``epochfs sample``
could reach end to end on a store and a machine: the interpreter's start and the imports a
download needs are in it, the sampler's own work is not. The in-process figure the benchmark also
prints leaves the process start out, so it cannot say that.

Run by :mod:`.fetch` (``--tools ...,download-path``); ``--store`` is a folder of its own on the
same file system as ``--dest``, which the benchmark removes after the run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import threading
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True, help="s3://bucket/prefix")
    ap.add_argument("--endpoint", required=True, help="the S3 endpoint URL")
    ap.add_argument("--dest", type=Path, required=True, help="where the objects end up, one file each")
    ap.add_argument("--store", type=Path, required=True, help="the download path's scratch store")
    ap.add_argument("--concurrency", type=int, default=32, help="download threads")
    args = ap.parse_args(argv)

    from epochfs.sidecar.download import Downloader, RetryPolicy
    from epochfs.sidecar.remote.s3 import S3Remote
    from epochfs.sidecar.store import Candidate, Store

    remote = S3Remote(url=args.url, endpoint_url=args.endpoint, concurrency=args.concurrency)
    store = Store(args.store, create=True)
    args.dest.mkdir(parents=True, exist_ok=True)
    try:
        cands = [Candidate(str(o.key), f"{i:032x}", o.size, o.version) for i, o in enumerate(remote.list())]
        downloader = Downloader(store=store, remote=remote, retry=RetryPolicy(attempts=1),
                                stop=threading.Event())
        with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
            results = list(pool.map(downloader.fetch, cands))
        failed = [r.error for r in results if r.admission is None]
        if failed:
            print(f"{len(failed)} downloads failed: {failed[:3]}", file=sys.stderr)
            return 1
        for i, r in enumerate(results):
            assert r.admission is not None
            os.replace(r.admission.temp, args.dest / f"{i:06d}")
        return 0
    finally:
        store.close()
        remote.close()


if __name__ == "__main__":
    sys.exit(main())
