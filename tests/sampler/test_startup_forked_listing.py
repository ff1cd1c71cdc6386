"""The first listing process is forked before the index is opened (sidecar/listing/child.py,
``fork_child``; sidecar/sampler/command.py).

A started listing process is a fresh interpreter that imports epochfs again (0.2-0.5 s on a quiet
node, seconds under load) before it can list, and on a remote of more than one page the sampler's
first fetches wait for the child's first pages. The first child is now forked at the start of the
command, with the listing's modules already imported, before any SQLite connection (a child must
not inherit one) and before any thread. These tests run the real command in a fresh process with
an audit hook and watch the order of what it does, up to its first object GET.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sampler_helpers import index_rows, s3_env

from epochfs.benchmarks.synthetic_s3 import Dataset, SyntheticS3

SCRIPT = """
import http.client, json, os, sys, threading

events = []
parent = os.getpid()

def hook(name, args):
    if os.getpid() != parent:
        return
    if name == "os.fork":
        events.append(["fork", threading.active_count()])
    elif name == "sqlite3.connect" and str(args[0]) != ":memory:":
        events.append(["sqlite3.connect"])
    elif name == "subprocess.Popen" and args[0] == sys.executable:
        events.append(["python started"])

sys.addaudithook(hook)
send = http.client.HTTPConnection.putrequest
first = threading.Lock()  # taken by the first object GET's thread, for good: one report

def first_object_get(self, method, url, *args, **kwargs):
    if method == "GET" and "list-type" not in url:
        first.acquire()
        print(json.dumps(events), flush=True)
        os._exit(0)  # the forked child dies with this process (PR_SET_PDEATHSIG)
    return send(self, method, url, *args, **kwargs)

http.client.HTTPConnection.putrequest = first_object_get
from epochfs.sidecar.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _first_object_get(tmp_path: Path, objects: int, *flags: str) -> list[list[object]]:
    cache = tmp_path / "cache"
    with SyntheticS3(Dataset(objects, 64), list_latency=0) as server:
        argv = ["--log-level", "WARNING", "sample", "--remote", server.url, "--cache", str(cache),
                "--endpoint-url", server.endpoint, "--capacity", "1Mi", *flags]
        out = subprocess.run([sys.executable, "-P", "-c", SCRIPT, *argv], capture_output=True, text=True,
                             timeout=120, env={**_env(), **s3_env(server.endpoint)})
    assert out.returncode == 0 and out.stdout, out.stderr[-3000:]
    events: list[list[object]] = json.loads(out.stdout)
    return events


def test_the_first_listing_process_is_forked_before_the_index_is_opened(tmp_path: Path) -> None:
    """2,500 keys (three pages: the listing process lists them): one fork, with no other thread
    running, before the first SQLite connection; no fresh interpreter before the first object GET."""
    events = _first_object_get(tmp_path, 2500)
    assert events[0] == ["fork", 1], events
    assert ["sqlite3.connect"] in events[1:], events
    assert ["python started"] not in events, events
    assert sum(e[0] == "fork" for e in events) == 1, events
    keys = {str(r[0]) for r in index_rows(tmp_path / "cache", "SELECT key FROM catalog")}
    assert keys <= {Dataset(2500, 64).key(i) for i in range(2500)} and keys  # listed by the child


def test_listing_on_threads_forks_nothing(tmp_path: Path) -> None:
    events = _first_object_get(tmp_path, 2500, "--list-process", "0")
    assert not any(e[0] in ("fork", "python started") for e in events), events


def _env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
