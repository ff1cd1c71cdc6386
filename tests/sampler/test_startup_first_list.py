"""A new cache's first LIST is sent before its index is opened (sidecar/sampler/command.py,
sidecar/remote/s3.py ``list_page_ahead``).

A cache with no index yet always begins with a new listing, whose first request is the first page
of the whole remote: the sampler asks for it before it creates, checks and recovers its index, so
that the round trip overlaps that work instead of following it; the discovery then takes that
answer (no second request for the page).

The real command runs in a fresh process with an audit hook: when it opens its index, the hook
waits (a poll with a deadline) for the first LIST to be on the wire while another thread, which
could send it, is alive, and records whether it came.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

from sampler_helpers import s3_env

from epochfs.benchmarks.synthetic_s3 import Dataset, SyntheticS3

SCRIPT = """
import http.client, json, os, sys, threading, time

sent = []
opened = []
first = threading.Lock()  # taken by the first object GET's thread, for good: one report

def could_send():
    # Only another thread can put a LIST on the wire while this one is held in the hook: with
    # none alive, none is coming.
    me = threading.current_thread()
    return any(t is not me and t.is_alive() for t in threading.enumerate())

def hook(name, args):
    # The index is opened by a URI (file:...index.sqlite?mode=rwc): its path ends before the "?".
    if name == "sqlite3.connect" and str(args[0]).split("?")[0].endswith("index.sqlite") and not opened:
        deadline = time.monotonic() + 10
        while not sent and could_send() and time.monotonic() < deadline:
            time.sleep(0.005)  # polls for the LIST thread's request, with a deadline
        opened.append(list(sent))

sys.addaudithook(hook)
send = http.client.HTTPConnection.putrequest

def watch(self, method, url, *args, **kwargs):
    if method == "GET" and "list-type" in url:
        sent.append(url.split("&X-Amz-")[0])
    elif method == "GET":
        first.acquire()
        print(json.dumps({"lists_before_the_index": opened[0] if opened else None, "lists": sent}),
              flush=True)
        os._exit(0)
    return send(self, method, url, *args, **kwargs)

http.client.HTTPConnection.putrequest = watch
from epochfs.sidecar.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _run(tmp_path: Path, cache: Path, *flags: str, script: str = SCRIPT,
         server: SyntheticS3 | None = None) -> subprocess.CompletedProcess[str]:
    """``epochfs sample`` run by ``script`` against ``server`` (default: a store of its own: a
    cache's restart needs the same one, since the cache records the endpoint it was filled from)."""
    if server is None:
        with SyntheticS3(Dataset(20, 64), list_latency=0) as own:
            return _run(tmp_path, cache, *flags, script=script, server=own)
    argv = ["--log-level", "WARNING", "sample", "--remote", server.url, "--cache", str(cache),
            "--endpoint-url", server.endpoint, "--capacity", "1Mi", *flags]
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return subprocess.run([sys.executable, "-P", "-c", script, *argv], capture_output=True, text=True,
                          timeout=120, env={**env, **s3_env(server.endpoint)})


def _seen(tmp_path: Path, cache: Path, *flags: str,
          server: SyntheticS3 | None = None) -> dict[str, list[str] | None]:
    out = _run(tmp_path, cache, *flags, server=server)
    assert out.returncode == 0 and out.stdout, out.stderr[-3000:]
    seen: dict[str, list[str] | None] = json.loads(out.stdout)
    return seen


def test_a_new_caches_first_list_is_sent_before_its_index_is_opened(tmp_path: Path) -> None:
    seen = _seen(tmp_path, tmp_path / "cache")
    assert seen["lists_before_the_index"] == seen["lists"], seen  # that LIST, and no other
    lists = seen["lists"]
    assert lists is not None and len(lists) == 1 and "start-after" not in lists[0], seen


def test_on_threads_too(tmp_path: Path) -> None:
    seen = _seen(tmp_path, tmp_path / "cache", "--list-process", "0")
    lists = seen["lists"]
    assert seen["lists_before_the_index"] == lists and lists is not None and len(lists) == 1, seen


def test_a_cache_with_an_index_asks_nothing_before_opening_it(tmp_path: Path) -> None:
    """Its listing may be complete (nothing to ask) or resume elsewhere: the index says first."""
    cache = tmp_path / "cache"
    with SyntheticS3(Dataset(20, 64), list_latency=0) as server:
        assert _seen(tmp_path, cache, server=server)["lists"]
        seen = _seen(tmp_path, cache, server=server)
    assert seen["lists_before_the_index"] == [], seen


def test_a_start_that_fails_after_the_list_was_sent_exits_as_before(tmp_path: Path) -> None:
    """The cache in use by another sampler: the same exit 2 and line, the early LIST dropped."""
    cache = tmp_path / "cache"
    cache.mkdir()
    fd = os.open(cache / "sampler.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        out = _run(tmp_path, cache, script="from epochfs.sidecar.cli import main; import sys; "
                                           "sys.exit(main(sys.argv[1:]))")
    finally:
        os.close(fd)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "is in use by another epochfs sample" in out.stderr, out.stderr[-3000:]
