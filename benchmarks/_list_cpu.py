"""CPU of one S3 listing page in the lister's process: ``S3Remote.list_page`` in a loop against the
synthetic S3 endpoint run as another process (so its XML is not counted), list latency 0.

``python -m epochfs.benchmarks._list_cpu [--pages 200] [--fast/--botocore]`` prints the CPU
(``time.process_time``) per page and per listed key. docs/listing.md quotes it: the listers run in
the sampler's process, so every microsecond of a page is GIL the sampler's fetches wait for.
(Underscored: a measurement for one paragraph of the docs, not one of ``epochfs bench``'s.)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time


def measure(endpoint: str, url: str, pages: int, *, fast: bool) -> tuple[float, int]:
    """CPU seconds and keys listed over ``pages`` pages (the listing is started again at its end)."""
    from epochfs.sidecar.remote.s3 import S3Remote

    remote = S3Remote(url=url, endpoint_url=endpoint)
    remote._fast = fast  # the botocore path, as when presigned URLs are refused
    try:
        remote.list_page("")  # warm: connections, botocore's loaders
        keys, token = 0, None
        start = time.process_time()
        for _ in range(pages):
            objects, _, token = remote.list_page("", token=token)
            keys += len(objects)
        return time.process_time() - start, keys
    finally:
        remote.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m epochfs.benchmarks._list_cpu", description=__doc__)
    p.add_argument("--pages", type=int, default=200)
    p.add_argument("--keys", type=int, default=100_000, help="keys in the synthetic bucket")
    ns = p.parse_args(argv)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    server = subprocess.Popen(
        [sys.executable, "-m", "epochfs.benchmarks.synthetic_s3", "--keys", str(ns.keys),
         "--list-latency", "0", "--prefix", "train/"], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        m = re.search(r"at (http://\S+): (s3://\S+)", server.stdout.readline())
        if m is None:
            raise SystemExit("the synthetic S3 endpoint did not start")
        for fast in (False, True):
            cpu, keys = measure(m.group(1), m.group(2), ns.pages, fast=fast)
            print(f"{'presigned + ElementTree' if fast else 'botocore':>24}: {ns.pages} pages, "
                  f"{keys} keys: {cpu * 1e3 / ns.pages:.1f} ms CPU a page, "
                  f"{cpu * 1e6 / max(1, keys):.1f} µs a key", flush=True)
    finally:
        server.terminate()
        server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
