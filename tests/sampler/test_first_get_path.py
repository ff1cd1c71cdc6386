"""What ``epochfs sample`` imports between its first LIST and its first object GET
(docs/performance.md, "Start-up to the first object GET").

The first download's metrics import (prometheus-client, ~23 ms) is made on a thread of its own once
the first LIST is sent, overlapping its round trip, not on the main thread after its answer;
awscrt (the CRCs) is not imported before the first object GET at all.

A fresh process runs the real command against the S3 server; the standard library's
``http.client`` is watched (each request still goes out) and an import finder that finds nothing
notes which thread first asked for a module, in order with the requests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import S3Server

SCRIPT = """
import http.client, json, os, sys, threading

events = []
ending = threading.Lock()
send = http.client.HTTPConnection.putrequest
WATCHED = ("prometheus_client", "awscrt")

class Noted:
    def find_spec(self, name, path=None, target=None):
        if name in WATCHED:
            events.append(["import", name, threading.current_thread().name])
        return None

sys.meta_path.insert(0, Noted())

def request(self, method, url, *args, **kwargs):
    path = url.split("?")[0]
    events.append([method, "object" if path.endswith(".bin") else "list" if "list-type=2" in url else url])
    if method == "GET" and path.endswith(".bin"):
        ending.acquire()  # one thread prints (another's object GET waits here for the exit)
        print(json.dumps(events), flush=True)
        os._exit(0)  # the first object GET is where this test ends
    return send(self, method, url, *args, **kwargs)

http.client.HTTPConnection.putrequest = request
from epochfs.sidecar.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _bucket(s3: S3Server, n: int) -> str:
    client = s3.client()
    client.create_bucket(Bucket="bkt")
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: client.put_object(Bucket="bkt", Key=f"ds/{i:05d}.bin", Body=b"x" * 100,
                                                  ChecksumAlgorithm="CRC64NVME"), range(n)))
    return "s3://bkt/ds"


def _events(s3: S3Server, url: str, cache: Path) -> list[list[str]]:
    argv = ["--log-level", "WARNING", "sample", "--remote", url, "--cache", str(cache),
            "--endpoint-url", s3.endpoint, "--capacity", "1Gi"]
    out = subprocess.run([sys.executable, "-P", "-c", SCRIPT, *argv], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout, out.stderr
    events: list[list[str]] = json.loads(out.stdout)
    return events


def test_the_first_downloads_imports_overlap_the_first_list(s3: S3Server, signed_here: None,
                                                            tmp_path: Path) -> None:
    events = _events(s3, _bucket(s3, 3), tmp_path / "cache")
    assert [e for e in events if e[0] in ("GET", "HEAD")] == [["GET", "list"], ["GET", "object"]]
    first_list = events.index(["GET", "list"])
    asked = [i for i, e in enumerate(events) if e[:2] == ["import", "prometheus_client"]]
    assert asked, events
    assert asked[0] > first_list, events  # nothing heavy before the first request
    assert events[asked[0]][2] == "preload", events  # not on the main thread's way
    # awscrt is left to the first body's hash, after the first object GET: imported beside the
    # LIST, it took the main thread's CPU on the way to that GET.
    assert not any(e[:2] == ["import", "awscrt"] for e in events), events
