"""An injected pod keeps its service links (``enableServiceLinks`` is pod-wide: the webhook leaves
it to the pod), so the kubelet gives every container, the injected sidecar too, the variables of
each Service in the namespace. A Service named ``epochfs-metrics`` (the name a user picks to scrape
the injected ``epochfs-metrics`` ports) makes ``EPOCHFS_METRICS_PORT=tcp://IP:PORT``, which the
sidecar refuses as a port (exit 2). The chart's sidecar sets that variable itself, and a
container's own variable wins over the service links.

The real ``epochfs sidecar`` runs with the environment the kubelet would give the injected
container: the service links of such Services first, the container's ``env`` over them. Only the
paths and the remote are this machine's (a ``file://`` dataset, the folder view, no API).
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from common import free_port, wait_until
from helm_helpers import render
from test_webhook_server import serve
from webhook_helpers import chart_values, job, job_pod, profile_documents, write_profiles

CLUSTER_IP = "10.96.0.12"


def service_links(service: str, port: int) -> dict[str, str]:
    """The variables the kubelet makes for a Service of one TCP port (Kubernetes' docker-link
    form: pkg/kubelet/envvars)."""
    prefix = service.upper().replace("-", "_")
    url = f"tcp://{CLUSTER_IP}:{port}"
    return {
        f"{prefix}_SERVICE_HOST": CLUSTER_IP,
        f"{prefix}_SERVICE_PORT": str(port),
        f"{prefix}_PORT": url,
        f"{prefix}_PORT_{port}_TCP": url,
        f"{prefix}_PORT_{port}_TCP_PROTO": "tcp",
        f"{prefix}_PORT_{port}_TCP_PORT": str(port),
        f"{prefix}_PORT_{port}_TCP_ADDR": CLUSTER_IP,
    }


def injected_sidecar(helm_bin: Path, tmp_path: Path, port: int) -> dict[str, Any]:
    """The sidecar the webhook injects with a folder-view profile whose health port is ``port``."""
    values = chart_values()
    values["webhook"]["profiles"] = {"links": {"sidecar": {"view": "folder", "healthPort": port}}}
    (tmp_path / "render").mkdir()
    docs = profile_documents(render(helm_bin, values, tmp_path / "render"))
    profiles = write_profiles(docs, tmp_path / "profiles")
    pod = job_pod(job(annotations={"epochfs.io/profile": "links"}))
    (tmp_path / "tls").mkdir()
    for served in serve(profiles, tmp_path / "tls"):
        response = served.client.review(pod)["response"]
        assert response["allowed"] is True, response
        patched = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    [sidecar] = [c for c in patched["spec"]["initContainers"] if c["name"] == "epochfs"]
    return sidecar


def _status(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path)
        return conn.getresponse().status
    except OSError:
        return 0
    finally:
        conn.close()


@pytest.mark.parametrize("service", ["epochfs-metrics", "epochfs-health"])
def test_the_injected_sidecar_starts_beside_a_service_of_its_names(
    helm_bin: Path, tmp_path: Path, service: str
) -> None:
    port = free_port()
    sidecar = injected_sidecar(helm_bin, tmp_path, port)
    data = tmp_path / "ds"
    data.mkdir()
    for i in range(5):
        (data / f"k{i}.bin").write_bytes(os.urandom(2000))
    env = {"PATH": os.environ["PATH"], **service_links(service, 8080), **service_links("epochfs", 8080)}
    env.update({e["name"]: e["value"] for e in sidecar["env"] if "value" in e})  # the container's win
    env.update(EPOCHFS_REMOTE=f"file://{data}", EPOCHFS_CACHE=str(tmp_path / "cache"),
               EPOCHFS_MOUNT=str(tmp_path / "view"), EPOCHFS_LINK_ROOT=str(tmp_path / "cache" / "objects"),
               EPOCHFS_KUBE_REPORTING="0", HOME=str(tmp_path))
    log = tmp_path / "sidecar.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "epochfs.sidecar.cli", "sidecar"], env=env,
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: proc.poll() is not None or _status(port, "/readyz") == 200, timeout=60,
                   what="the sidecar ready")
        assert proc.poll() is None, f"exit {proc.returncode}: {log.read_text()[-2000:]}"
        assert _status(port, "/metrics") == 200
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
