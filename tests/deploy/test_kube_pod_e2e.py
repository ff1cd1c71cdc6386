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

import hashlib
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
from common import S3Server, free_port, put_objects, random_objects, wait_until
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
    # The shared volume's volumeMount with mountPropagation Bidirectional: a mount point of its
    # own, shared, so that mounts below it reach every container that binds the volume.
    mount --bind "$VOLUME" "$VOLUME"
    mount --make-rshared "$VOLUME"
    unset SA_DIR CACHE_RO
    "$@" & pid=$!
    trap 'kill -TERM $pid' TERM
    code=0; wait $pid || code=$?
    if [ $code -gt 128 ] && kill -0 $pid 2>/dev/null; then code=0; wait $pid || code=$?; fi
    # Whatever the sidecar did, the volume's own mount point must still be there, with no FUSE
    # mount left below it.
    grep -q " $VOLUME " /proc/self/mountinfo || { echo "pod-setup: the volume mount is gone"; exit 97; }
    if grep " fuse" /proc/self/mountinfo | grep -q " $VOLUME/"; then
      echo "pod-setup: FUSE left mounted"; exit 98
    fi
    exit $code
""")

# The trainer's container: a mount namespace of its own made after the sidecar mounted, holding the
# volume as the container runtime gives it (a recursive bind of the volume's folder, rslave for
# HostToContainer). Run as the chart's trainer UID; one long-lived process reads epoch after epoch.
TRAINER_SETUP = textwrap.dedent("""\
    set -eu
    mount --rbind "$VOLUME" "$VOLUME"
    mount --make-rslave "$VOLUME"
    exec setpriv --reuid="$TRAINER_UID" --regid="$TRAINER_UID" --clear-groups "$@"
""")

TRAINER = textwrap.dedent("""\
    import errno, hashlib, json, os, sys, time
    view, ro = sys.argv[1], sys.argv[2]

    def read_epoch(n, timeout):
        # Like epochfs.torchclient with wait=True: a lookup of epoch-N asks for the cut; until the
        # cut (or while the FUSE server restarts) the lookup fails and is asked again.
        root = os.path.join(view, f"epoch-{n}")
        deadline = time.monotonic() + timeout
        errors = set()
        while True:
            try:
                if os.path.isdir(root):
                    break
            except OSError as e:
                errors.add(errno.errorcode[e.errno])
            if time.monotonic() > deadline:
                return {"error": f"epoch-{n} never appeared", "errors": sorted(errors)}
            time.sleep(0.05)
        out = {"uid": os.getuid(), "files": {}, "targets_ok": True, "errors": sorted(errors)}
        for dirpath, _, names in os.walk(root):
            for name in names:
                path = os.path.join(dirpath, name)
                target = os.readlink(path)
                out["targets_ok"] &= target.startswith(ro + "/objects/")
                with open(path, "rb") as f:
                    out["files"][os.path.relpath(path, root)] = hashlib.sha256(f.read()).hexdigest()
        for attempt in (lambda: open(target, "r+b"), lambda: open(os.path.join(root, "new"), "wb")):
            try:
                attempt().close()
                out.setdefault("writes", []).append("allowed")
            except OSError as e:
                out.setdefault("writes", []).append(errno.errorcode[e.errno])
        return out

    for line in sys.stdin:
        n, timeout = line.split()
        print(json.dumps(read_epoch(int(n), float(timeout))), flush=True)
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


@pytest.mark.long
def test_sidecar_as_rendered_reports_to_the_cluster(s3: S3Server, tmp_path: Path,
                                                    request: pytest.FixtureRequest) -> None:
    objects = random_objects(20, 16 * 1024)
    put_objects(s3, BUCKET, objects)
    # pytest's tmp_path sits under a 0700 folder the trainer's UID could not traverse; in a pod
    # these are /var/cache/epochfs{,-ro} and /mnt/epochfs.
    base = Path(tempfile.mkdtemp(prefix="epochfs-pod-", dir="/tmp"))
    base.chmod(0o755)
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    cache, cache_ro, volume = base / "cache", base / "cache-ro", base / "mnt"
    for d in (cache, cache_ro, volume):
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
        "sidecar": {"mountPath": str(volume), "healthPort": port, "minSamples": 5},
        "cache": {"path": str(cache), "readOnlyPath": str(cache_ro), "volume": {"size": "64Mi"}},
        "kubeReporting": {"statusIntervalSeconds": 1},
    })
    spec = pod_spec(render(helm_binary(), values, tmp_path))
    env = _pod_env(spec, api)
    assert env["EPOCHFS_LINK_ROOT"] == f"{cache_ro}/objects" and env["EPOCHFS_KUBE_REPORTING"] == "1"
    # The view lives in a subdirectory of the shared volume (which the sidecar creates), never on
    # the volume's own mount point, and both containers are told the same path.
    view = Path(env["EPOCHFS_MOUNT"])
    assert view.parent == volume and not view.exists()
    trainer_env = {e["name"]: e.get("value") for e in container(spec, "trainer")["env"]}
    assert trainer_env["EPOCHFS_MOUNT"] == str(view)
    log = tmp_path / "sidecar.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", POD_SETUP, "pod-setup",
             sys.executable, "-m", "epochfs.sidecar.cli", "sidecar"],  # the image's ENTRYPOINT
            env={**env, "SA_DIR": str(sa), "CACHE_RO": str(cache_ro), "VOLUME": str(volume)},
            stdout=out, stderr=subprocess.STDOUT,
        )
    ok = False
    trainer: subprocess.Popen[str] | None = None
    try:
        wait_until(lambda: _get(port, "/readyz")[0] == 200 or proc.poll() is not None, timeout=90,
                   what="/readyz of the sidecar")
        assert proc.poll() is None, log.read_text()[-5000:]

        # The trainer: started once the sidecar is ready (the native sidecar's startupProbe), in a
        # mount namespace of its own, as the chart's UID.
        trainer = subprocess.Popen(
            ["nsenter", f"--target={proc.pid}", "--mount", "--",
             "unshare", "--mount", "--propagation", "slave", "sh", "-c", TRAINER_SETUP, "trainer-setup",
             sys.executable, "-c", TRAINER, str(view), str(cache_ro)],
            env={"PATH": os.environ["PATH"], "VOLUME": str(volume), "TRAINER_UID": str(TRAINER_UID)},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )

        def read_epoch(n: int, timeout: float) -> dict[str, Any]:
            assert trainer is not None and trainer.stdin is not None and trainer.stdout is not None
            trainer.stdin.write(f"{n} {timeout}\n")
            trainer.stdin.flush()
            line = trainer.stdout.readline()
            assert line, f"the trainer died (exit {trainer.poll()})"
            result: dict[str, Any] = json.loads(line)
            return result

        def check_epoch(seen: dict[str, Any]) -> None:
            assert "error" not in seen, seen
            assert seen["uid"] == TRAINER_UID and len(seen["files"]) >= 5
            assert seen["targets_ok"], "epoch symlinks must point into the read-only cache path"
            assert set(seen["writes"]) <= {"EROFS", "EACCES"}, seen["writes"]
            for rel, digest in seen["files"].items():
                assert hashlib.sha256(objects[rel]).hexdigest() == digest, rel

        check_epoch(read_epoch(0, 60))

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

        # A FUSE server crash: remounted, the cluster is told, and the trainer that started before
        # the crash reads a new epoch through the new mount within seconds.
        health = json.loads(_get(port, "/healthz")[1])
        fuse_pid = health["children"]["fuse"]["pid"]
        os.kill(fuse_pid, signal.SIGKILL)
        after = read_epoch(1, 15)
        check_epoch(after)
        wait_until(lambda: any(e["reason"] == "Remounted" for e in api.events.values()), timeout=30,
                   what="a Remounted Event")
        assert api.event("Remounted")["type"] == "Warning"
        assert api.protocol_errors == []
        assert api.rbac_calls() <= {("", "events", "create"), ("", "events", "patch"), ("", "pods", "patch")}
        ok = True
    finally:
        if trainer is not None:
            trainer.kill()
            trainer.wait()
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
