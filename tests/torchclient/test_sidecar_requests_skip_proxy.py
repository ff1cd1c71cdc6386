"""The torch client's cut requests and reports reach the pod's sidecar with HTTP_PROXY set.

Why: clusters behind a corporate proxy set ``HTTP_PROXY``/``http_proxy`` pod-wide (for pip, model
hubs), and urllib's ``urlopen`` sent the loopback requests to the sidecar through it. No proxy can
reach the pod's loopback, so on the folder view epoch 0 was never cut and the error asked "is the
sidecar running?" while it was; the reports (the epochs in use) failed quietly. Real parts: a real
``epochfs sidecar --view folder`` over a ``file://`` remote, a real forward proxy that refuses
every request (it wants credentials the trainer lacks) and records it, and the trainer in its own
process with the proxy variables in its environment and no ``NO_PROXY``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import wait_until
from folderview_helpers import folder_sidecar, owned_dir, write_remote
from proxy_helpers import ForwardProxy, proxied, refusing_proxy

OBJECTS = {f"train/{i:02d}.bin": bytes([i]) * 256 for i in range(6)}

TRAINER = """\
import json, sys
from epochfs.torchclient import EpochDataset
from epochfs.torchclient.report import ClientReporter, report_url_from_env
got = {}
try:
    got["files"] = len(EpochDataset(sys.argv[1], 0, timeout=20, progress=None))
except Exception as e:
    got["error"] = f"{type(e).__name__}: {e}"
reporter = ClientReporter(url=report_url_from_env(), interval=3600)
reporter.add(samples=3, nbytes=768, wait_seconds=0.01)
got["reported"] = reporter.flush()
print(json.dumps(got))
"""


@pytest.fixture
def proxy() -> Iterator[ForwardProxy]:
    with refusing_proxy() as forward:
        yield forward


def proxied_env(proxy: ForwardProxy, **extra: str) -> dict[str, str]:
    """This process's environment with every proxy variable naming ``proxy`` and no NO_PROXY."""
    return {**proxied(os.environ, proxy), **extra}


def test_cut_and_report_go_direct_to_the_sidecar(proxy: ForwardProxy) -> None:
    with owned_dir() as base:
        remote = base / "remote"
        write_remote(remote, OBJECTS)
        with folder_sidecar(base, remote) as car:
            assert not (car.mount / "epoch-0").exists()  # only the client's cut request makes it
            env = proxied_env(proxy, HOME=str(base),
                              EPOCHFS_REPORT_URL=f"http://127.0.0.1:{car.port}/v1/client-report")
            proc = subprocess.run([sys.executable, "-c", TRAINER, str(car.mount)], capture_output=True,
                                  text=True, timeout=120, env=env)
            assert proc.returncode == 0, proc.stderr
            got = json.loads(proc.stdout.strip().splitlines()[-1])
            assert got.get("files") == len(OBJECTS), got
            assert got["reported"] is True, got
            wait_until(lambda: car.metric("epochfs_client_samples_total") == 3.0, timeout=10,
                       what="the report in /metrics")
    assert proxy.refused == 0 and proxy.relayed == [], (proxy.refused, proxy.relayed)


def test_the_proxy_is_still_there_for_other_urls(proxy: ForwardProxy, tmp_path: Path) -> None:
    """The check above can fail: the same trainer environment sends an ordinary urlopen through
    the proxy, which refuses it and counts it."""
    code = ("import urllib.request, urllib.error\n"
            "try:\n    urllib.request.urlopen('http://127.0.0.1:9/x', timeout=10)\n"
            "except urllib.error.HTTPError as e:\n    print(e.code)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=proxied_env(proxy, HOME=str(tmp_path)))
    assert proc.stdout.strip() == "407", (proc.stdout, proc.stderr)
    assert proxy.refused == 1
