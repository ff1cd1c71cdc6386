"""``epochfs status --cache`` names a remote outage only when the record is the running sampler's:
its pid is the one the sampler wrote into its lock file. A record a killed run left is removed by
the next run as soon as it holds the lock; until then (and should that removal fail, on a full
volume) the dead run's outage is no state of the cache now, so status must not show it as one.

A real ``flock`` held by a second process through the sampler's own :func:`samplerlock.hold`, and
the real ``epochfs status`` command."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from epochfs.sidecar.store import Meta, Store
from epochfs.sidecar.store.outage import Outage

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
HOLD = ("import sys; from pathlib import Path; from epochfs.sidecar import samplerlock; "
        "samplerlock.hold(Path(sys.argv[1])); print('held', flush=True); sys.stdin.read()")


@contextmanager
def lock_held(cache: Path) -> Iterator[int]:
    """A process that holds ``cache``'s sampler lock as a running sampler does; its pid."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(cache)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        yield proc.pid
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)


def record(cache: Path, pid: int) -> None:
    outage = Outage(cause="credentials_refused", since=round(time.time() - 60, 3), objects=9,
                    error="CredentialsRefused: ClientError: InvalidAccessKeyId", pid=pid)
    with Store(cache) as store:
        store.set_meta(Meta.OUTAGE, outage.to_json())


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


def status(cache: Path) -> dict[str, Any]:
    done = subprocess.run([EPOCHFS, "status", "--json", "--cache", str(cache)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def test_only_the_lock_holders_outage_is_shown(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    Store(cache, create=True).close()
    with lock_held(cache) as holder:
        record(cache, pid=dead_pid())  # a run killed mid-outage
        doc = status(cache)
        assert doc["sampler_running"] is True
        assert "outage" not in doc and "outage_cause" not in doc, doc
        record(cache, pid=holder)
        doc = status(cache)
        assert doc["outage_cause"] == "credentials_refused", doc
        assert doc["outage"].startswith("remote refuses the credentials since "), doc
