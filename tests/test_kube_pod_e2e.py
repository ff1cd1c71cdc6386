"""The sidecar exactly as the chart configures it, in a pod-like mount layout, reporting to a fake
API server: no cluster needed, nothing faked inside epochfs.

The sidecar's environment is taken from `helm template` (its EPOCHFS_* settings, downward-API
variables, kube reporting switches), with paths, port and S3 endpoint set through chart values.
It runs in a private mount namespace (``unshare --mount``) laid out like the pod: the service
account token and CA at /var/run/secrets/kubernetes.io/serviceaccount, the cache volume
read-write at cache.path and bound read-only at cache.readOnlyPath (what the kubelet does for a
readOnly volumeMount). A "trainer" then enters that namespace as UID 10001, the chart's trainer
user, and reads epoch-0 through the FUSE view: the symlinks must land on the read-only path and
give the remote's bytes. Meanwhile the fake API server (HTTPS, token checked, every body
validated against the Kubernetes schema) must receive the EpochCut and Remounted Events and the
status annotation. Everything lives in the namespace, so nothing can stay mounted on the host.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import S3Server, free_port, put_objects, random_objects, wait_until
from helm_helpers import container, helm_binary, pod_spec, render, with_remote
from kube_fake_api import FakeApiServer

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE"),
    pytest.mark.skipif(not all(shutil.which(t) for t in ("unshare", "nsenter", "setpriv")),
                       reason="needs util-linux unshare, nsenter and setpriv"),
]

BUCKET = "data"
TRAINER_UID = 10001

POD_SETUP = textwrap.dedent("""\
    set -eu
    # /run only for this namespace: the pod's service account files live under it.
    mount -t tmpfs -o mode=0755 tmpfs /run
    mkdir -p /run/secrets/kubernetes.io/serviceaccount
    cp "$SA_DIR/token" "$SA_DIR/ca.crt" "$SA_DIR/namespace" /run/secrets/kubernetes.io/serviceaccount/
    # The kubelet's readOnly volumeMount of the cache volume: a read-only bind.
    mount --bind "$EPOCHFS_CACHE" "$CACHE_RO"
    mount -o remount,bind,ro "$CACHE_RO"
    unset SA_DIR CACHE_RO
    exec "$@"
""")

TRAINER = textwrap.dedent("""\
    import errno, hashlib, json, os, sys, time
    mount, ro = sys.argv[1], sys.argv[2]
    root = os.path.join(mount, "epoch-0")
    # Like epochfs.torchclient with wait=True: a lookup of epoch-0 asks for the cut, which
    # happens once min-samples are in; until then the lookup answers ENOENT.
    deadline = time.monotonic() + 60
    while not os.path.isdir(root):
        if time.monotonic() > deadline:
            sys.exit("epoch-0 never appeared")
        time.sleep(0.2)
    out = {"uid": os.getuid(), "files": {}, "targets_ok": True}
    for dirpath, _, names in os.walk(root):
        for name in names:
            path = os.path.join(dirpath, name)
            target = os.readlink(path)
            out["targets_ok"] &= target.startswith(ro + "/objects/")
            with open(path, "rb") as f:
                out["files"][os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
    try:
        open(target, "r+b").close()
        out["write"] = "allowed"
    except OSError as e:
        out["write"] = errno.errorcode[e.errno]
    print(json.dumps(out))
""")


def _pod_env(spec: dict[str, Any], api: FakeApiServer) -> dict[str, str]:
    """The sidecar's env as the kubelet would set it (downward API filled in), plus what the
    cluster and the image add."""
    downward = {"metadata.name": api.pod_name, "metadata.namespace": api.namespace,
                "metadata.uid": api.pod_uid, "spec.nodeName": "node-7"}
    env: dict[str, str] = {}
    for e in container(spec, "epochfs")["env"]:
        if "value" in e:
            env[e["name"]] = e["value"]
        else:
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            env[e["name"]] = "0" if "job-completion-index" in path else downward[path]
    env.update({
        "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(api.port),
        "PATH": os.environ["PATH"], "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
        # What remote.credentials.secretName would inject (moto accepts any key).
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
    })
    return env


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return 0, b""


def test_sidecar_as_rendered_reports_to_the_cluster(s3: S3Server, tmp_path: Path,
                                                    request: pytest.FixtureRequest) -> None:
    import hashlib

    objects = random_objects(20, 16 * 1024)
    put_objects(s3, BUCKET, objects)
    # pytest's tmp_path sits under a 0700 folder the trainer's UID could not traverse; in a pod
    # these are /var/cache/epochfs{,-ro} and /mnt/epochfs.
    base = Path(tempfile.mkdtemp(prefix="epochfs-pod-", dir="/tmp"))
    base.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    cache, cache_ro, mnt = base / "cache", base / "cache-ro", base / "mnt"
    for d in (cache, cache_ro, mnt):
        d.mkdir()
    port = free_port()
    api = FakeApiServer(tls_dir=tmp_path / "tls").start()
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text(api.token)
    (sa / "namespace").write_text(api.namespace)
    assert api.ca_file is not None
    (sa / "ca.crt").write_bytes(api.ca_file.read_bytes())

    values = with_remote({
        "remote": {"url": f"s3://{BUCKET}", "endpointUrl": s3.endpoint},
        "sidecar": {"mountPath": str(mnt), "healthPort": port, "minSamples": 5},
        "cache": {"path": str(cache), "readOnlyPath": str(cache_ro), "volume": {"size": "64Mi"}},
        "kubeReporting": {"statusIntervalSeconds": 1},
    })
    spec = pod_spec(render(helm_binary(), values, tmp_path))
    env = _pod_env(spec, api)
    assert env["EPOCHFS_LINK_ROOT"] == f"{cache_ro}/objects" and env["EPOCHFS_KUBE_REPORTING"] == "1"
    log = tmp_path / "sidecar.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", POD_SETUP, "pod-setup",
             sys.executable, "-m", "epochfs.sidecar.cli", "sidecar"],  # the image's ENTRYPOINT
            env={**env, "SA_DIR": str(sa), "CACHE_RO": str(cache_ro)}, stdout=out, stderr=subprocess.STDOUT,
        )
    ok = False
    try:
        wait_until(lambda: _get(port, "/readyz")[0] == 200 or proc.poll() is not None, timeout=90,
                   what="/readyz of the sidecar")
        assert proc.poll() is None, log.read_text()[-5000:]

        # The trainer: the chart's UID, in the pod's mount namespace, reading epoch-0.
        trainer = subprocess.run(
            ["nsenter", f"--target={proc.pid}", "--mount", "--",
             "setpriv", f"--reuid={TRAINER_UID}", f"--regid={TRAINER_UID}", "--clear-groups",
             sys.executable, "-c", TRAINER, str(mnt), str(cache_ro)],
            capture_output=True, text=True, timeout=60,
        )
        assert trainer.returncode == 0, trainer.stderr
        seen = json.loads(trainer.stdout)
        assert seen["uid"] == TRAINER_UID and len(seen["files"]) >= 5
        assert seen["targets_ok"], "epoch symlinks must point into the read-only cache path"
        assert seen["write"] in ("EROFS", "EACCES")
        for rel, digest in seen["files"].items():
            assert hashlib.sha256(objects[rel]).hexdigest() == digest, rel

        # The cluster hears about it.
        wait_until(lambda: any(e["reason"] == "EpochCut" for e in api.events.values()), timeout=30,
                   what="an EpochCut Event")
        cut = api.event("EpochCut")
        assert cut["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "name": api.pod_name,
                                         "namespace": api.namespace, "uid": api.pod_uid}
        assert cut["source"] == {"component": "epochfs-sidecar", "host": "node-7"}
        assert cut["message"].startswith("cut epoch 0 with ")
        wait_until(lambda: (api.annotation() or {}).get("latestEpoch") == 0, timeout=30,
                   what="the status annotation")
        note = api.annotation()
        assert note is not None and note["samples"] >= 5 and note["capacityBytes"] == 64 * 1024**2 * 9 // 10

        # A FUSE server crash: remounted, and the cluster is told.
        health = json.loads(_get(port, "/healthz")[1])
        fuse_pid = health["children"]["fuse"]["pid"]
        os.kill(fuse_pid, signal.SIGKILL)
        wait_until(lambda: any(e["reason"] == "Remounted" for e in api.events.values()), timeout=30,
                   what="a Remounted Event")
        assert api.event("Remounted")["type"] == "Warning"
        assert api.protocol_errors == []
        assert api.rbac_calls() <= {("", "events", "create"), ("", "events", "patch"), ("", "pods", "patch")}
        ok = True
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
        else:
            code = proc.returncode
        api.stop()
        if not ok:
            sys.stderr.write(f"--- sidecar log ---\n{log.read_text(errors='replace')[-20000:]}\n")
    assert code == 0, f"sidecar exit {code} after SIGTERM:\n{log.read_text()[-5000:]}"
