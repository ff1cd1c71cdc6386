"""The chart's pod for real: the image built from the Dockerfile and the Job's pod from `helm
template` run container by container by a real Docker engine (tests/container_pod.py), against a
real S3 server (moto) on 127.0.0.1.

Why: the other chart tests validate the rendered objects and run the sidecar in a namespace made
to look like a pod; only a container runtime shows whether the pod works as written: the
propagation of the FUSE mount between containers, the users, the read-only roots, the privileged
sidecar, libfuse in the image, signals. What is checked, for the native sidecar and the legacy
(regular container) one, and for two pods of a two-node Job:

* the trainer (tests/container_trainer.py, in place of the chart's command, as the chart's user)
  reads every byte of epoch 0 through the view's symlinks, equal to the remote's bytes, and every
  write or create it tries (view, symlink targets, cache, volume, root filesystem) is refused;
* kill -9 of the FUSE server inside the sidecar container, and the same trainer process reads a
  new epoch within seconds;
* the pod's end (SIGTERM, terminationGracePeriodSeconds): the sidecar exits 0 and nothing stays
  mounted under the pod's folders; the sidecar's log names the libfuse it loaded;
* the plain Pod of examples/kubernetes (the attach snippet) behaves like the Job's pod, and so
  does a user's own Pod mutated by the admission webhook: the chart's webhook Deployment run from
  the same image, called over HTTPS with an AdmissionReview v1 as the API server would, its
  JSONPatch applied (tests/webhook_container.py);
* the legacy sidecar (sidecar.native=false) keeps the native one's promises: the trainer starts
  only once epoch 0 can be cut (a plain listing of epoch-0/ at its start finds it), and on the
  pod's SIGTERM, sent to both containers at once, the view stays up while the trainer saves;
* with two nodes, each pod's epoch holds only keys of its own shard;
* the folder view (sidecar.view=folder): the rendered pod passes the Restricted Pod Security
  Standard (tests/pss.py), its sidecar runs as 10001 with no capability, no_new_privs and a
  read-only root, and the same checks hold (byte-exact reads with the epochs asked for over the
  loopback port, refused writes, kill -9 of the publisher, SIGTERM exit 0);
* the image: gcsfs imports (gs:// remotes), the installed packages are exactly the pinned ones,
  epochfs's dist-info holds its LICENSE, no pip, no layer holds wheels, the default user is 10001;
* the leftovers of an interrupted run (a container in the kept data root, the mounts of a
  SIGKILLed dockerd) do not break the next engine start or a pod with the same names, and a
  dockerd that ignores SIGTERM is killed without leaving a mount.

It runs only when EPOCHFS_CONTAINER_TEST=1, which `make test-container` sets after installing
docker.io and debootstrap (docs/container-test.md); then a missing prerequisite (root, /dev/fuse,
dockerd, runc, debootstrap) fails the test instead of skipping it.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from common import S3Server, free_port, put_objects, random_objects, wait_until
from container_engine import ROOT, Engine, base_image, epochfs_image
from container_pod import Pod, job_pods
from helm_helpers import helm_binary, one, render, render_pod_snippet
from pod_env import PodIdentity, PodObjects
from pod_volumes import mount_points
from webhook.webhook_helpers import validate_k8s
from webhook_container import json_patch, running_webhook, webhook_values

pytestmark = [
    pytest.mark.fuse,
    pytest.mark.skipif(os.environ.get("EPOCHFS_CONTAINER_TEST") != "1",
                       reason="run by `make test-container` (EPOCHFS_CONTAINER_TEST=1)"),
    pytest.mark.timeout(1800),
]

BUCKET = "data"
OBJECTS = random_objects(48, 64 * 1024)
MIN_SAMPLES = 10
TRAINER_UID = 10001
REFUSED = {"EROFS", "EACCES"}
SECRET = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
          "AWS_DEFAULT_REGION": "us-east-1"}
TRAINER_SCRIPT = (Path(__file__).resolve().parents[1] / "container_trainer.py").read_text()
assert "$(" not in TRAINER_SCRIPT  # the kubelet would expand it in a command


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    # Asked for explicitly (make test-container): what is missing fails, rather than skipping to
    # a green run that tested nothing.
    missing = [what for what, ok in (
        ("root", os.geteuid() == 0), ("/dev/fuse", os.path.exists("/dev/fuse")),
        ("dockerd (Debian docker.io)", shutil.which("dockerd")), ("runc", shutil.which("runc")),
        ("debootstrap", shutil.which("debootstrap")), ("/usr/bin/python3 (runc-wrapper)",
                                                       os.access("/usr/bin/python3", os.X_OK)),
    ) if not ok]
    if missing:
        pytest.fail(f"the container test needs {', '.join(missing)}")
    engine = Engine().start()
    try:
        yield engine
    finally:
        engine.stop()
    assert engine.proc is None and mount_points(engine.cache) == []  # dockerd gone, nothing mounted


@pytest.fixture(scope="module")
def image(engine: Engine) -> str:
    return epochfs_image(engine.docker, base_image(engine.docker))


def epochfs_values(image: str, s3: S3Server, *, native: bool, nodes: int, port: int,
                   view: str = "fuse") -> dict[str, Any]:
    """The chart's values for this test: the local image, moto as the remote with its keys from a
    Secret, no cluster reporting."""
    repository, tag = image.rsplit(":", 1)
    return {
        "sidecar": {"native": native, "healthPort": port, "minSamples": MIN_SAMPLES,
                    "startupTimeoutSeconds": 120, "view": view},
        "remote": {"url": f"s3://{BUCKET}", "endpointUrl": s3.endpoint,
                   "credentials": {"secretName": "s3-credentials", "mode": "env"}},
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "cache": {"volume": {"size": "256Mi"}},
        "kubeReporting": {"enabled": False},
        "nodes": nodes,
        "terminationGracePeriodSeconds": 30,
    }


def job(tmp_path: Path, image: str, s3: S3Server, *, native: bool, nodes: int, port: int,
        mode: str, view: str = "fuse") -> dict[str, Any]:
    """The chart's Job for this test, with the local image and the trainer script as the
    trainer's command."""
    repository, tag = image.rsplit(":", 1)
    values = epochfs_values(image, s3, native=native, nodes=nodes, port=port, view=view)
    values["trainer"] = {"image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
                         "command": ["python", "-c", TRAINER_SCRIPT], "args": [mode]}
    return one(render(helm_binary(), values, tmp_path), "Job")


def health(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as r:
        value: dict[str, Any] = json.loads(r.read())
        return value


def result(pod: Pod, tmp: Path, name: str, timeout: float) -> dict[str, Any]:
    """A result file of the trainer, once written; fails at once if the trainer died first."""
    path = tmp / name

    def ready() -> bool:
        if path.exists():
            return True
        state = pod.state("trainer")
        if not state["Running"] and not path.exists():
            raise AssertionError(f"trainer exited {state['ExitCode']} before {name}:\n{pod.logs('trainer')}")
        return False

    wait_until(ready, timeout=timeout, interval=0.1, what=name)
    value: dict[str, Any] = json.loads(path.read_text())
    summary = {k: v for k, v in value.items() if k not in ("files", "targets")}
    print(name, summary, f"{len(value.get('files', ()))} file(s)")  # shown when a test fails
    return value


def check_epoch(seen: dict[str, Any], cache_ro: str, *, keys: set[str] | None = None) -> None:
    """Every file of the epoch equals the remote's object; links land in the read-only cache."""
    assert "error" not in seen, seen
    assert len(seen["files"]) >= MIN_SAMPLES, seen
    for rel, digest in seen["files"].items():
        assert hashlib.sha256(OBJECTS[rel]).hexdigest() == digest, rel
        assert seen["targets"][rel].startswith(cache_ro + "/objects/"), seen["targets"][rel]
    if keys is not None:
        assert set(seen["files"]) <= keys


def check_trainer_confined(first: dict[str, Any]) -> None:
    """The restricted trainer as the chart declares it: its user and fsGroup, no capabilities,
    no_new_privs, a read-only root; and no write anywhere near the data goes through."""
    who = first["identity"]
    assert (who["uid"], who["gid"]) == (TRAINER_UID, TRAINER_UID) and TRAINER_UID in who["groups"], who
    assert int(who["cap_eff"], 16) == 0 and who["no_new_privs"] == "1" and who["root_read_only"], who
    allowed = {op: answer for op, answer in first["refused"].items() if answer not in REFUSED}
    assert not allowed, allowed


def trainer_env(pod: Pod) -> dict[str, str]:
    config: dict[str, Any] = pod.docker.inspect(pod.name_of("trainer"))["Config"]
    return dict(e.split("=", 1) for e in config["Env"])


def start(tmp_path: Path, engine: Engine, spec: dict[str, Any], identity: PodIdentity, name: str) -> Pod:
    pod = Pod(engine.docker, spec, identity, tmp_path / name,
              objects=PodObjects(secrets={"s3-credentials": SECRET}))
    pod.start(timeout=180)
    return pod


def end(pod: Pod, *, fuse: bool = True) -> None:
    """The pod's end: the trainer has exited 0; SIGTERM within the grace period; the sidecar
    exits 0, nothing of the pod stays mounted, and the sidecar said which libfuse it loaded (the
    image's: libfuse 3.17 on trixie) and that it served through the low-level API."""
    assert pod.wait_for("trainer", 120) == 0, pod.logs("trainer")
    began = time.monotonic()
    codes = pod.terminate()
    assert codes == {"epochfs": 0, "trainer": 0}, (codes, pod.logs("epochfs")[-4000:])
    assert time.monotonic() - began < pod.grace
    assert pod.leftover_mounts() == []
    assert not fuse or re.search(r"with libfuse 3\.\d+ from /\S*libfuse3\.so\.\d+, low-level API",
                                  pod.logs("epochfs")), \
        pod.logs("epochfs")[-4000:]


def crash_and_end(pod: Pod, port: int) -> None:
    """Epoch 0 read and writes refused; kill -9 of the FUSE server and the same trainer reads
    epoch 1; then the pod's end."""
    env = trainer_env(pod)
    tmp = pod.host_path("trainer", "/tmp")
    first = result(pod, tmp, "result-0.json", 120)
    check_epoch(first, env["EPOCHFS_CACHE"])
    check_trainer_confined(first)

    # kill -9 of the FUSE server inside the sidecar container: the supervisor remounts, and
    # the trainer process that started before reads a new epoch through the new mount.
    fuse_pid = health(port)["children"]["fuse"]["pid"]
    pod.exec("epochfs", "python", "-c", f"import os, signal; os.kill({fuse_pid}, signal.SIGKILL)")
    killed = time.monotonic()
    (tmp / "go-1").touch()
    second = result(pod, tmp, "result-1.json", 90)
    check_epoch(second, env["EPOCHFS_CACHE"])
    assert second["epoch"] == 1 and time.monotonic() - killed < 10, second
    assert health(port)["children"]["fuse"]["pid"] != fuse_pid
    end(pod)


@pytest.mark.parametrize("native", [True, False], ids=["native-sidecar", "legacy-sidecar"])
def test_pod_reads_epochs_survives_a_fuse_crash_and_ends_clean(
        engine: Engine, image: str, s3: S3Server, tmp_path: Path, native: bool) -> None:
    put_objects(s3, BUCKET, OBJECTS)
    port = free_port()
    [(spec, identity)] = job_pods(job(tmp_path, image, s3, native=native, nodes=1, port=port, mode="crash"))
    pod = start(tmp_path, engine, spec, identity, "pod")
    try:
        crash_and_end(pod, port)
    finally:
        print(f"--- sidecar log ---\n{pod.logs('epochfs')}\n--- trainer log ---\n{pod.logs('trainer')}")
        pod.cleanup()


# The trainer of the legacy pod: one plain listing of epoch-0 at its start (no retry, as with
# np.load of a file), then it sits in epoch-0; on the pod's SIGTERM it takes a few seconds to save
# a checkpoint, the time a real one takes, and reads the view again before it exits 0.
LEGACY_TRAINER = """import os, signal, sys, time
epoch = os.path.join(os.environ['EPOCHFS_MOUNT'], 'epoch-0')
def count(top):
    return sum(len(files) for _, _, files in os.walk(top, onerror=print))
print('at start, epoch-0 holds', count(epoch), 'files', flush=True)
os.chdir(epoch)
def term(*_):
    print('SIGTERM: saving a checkpoint', flush=True)
    time.sleep(3)
    print('after SIGTERM, epoch-0 holds', count('.'), 'files', flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
open('/tmp/reading', 'w').close()
while True:
    time.sleep(1)
"""
assert "$(" not in LEGACY_TRAINER


def test_legacy_trainer_starts_once_ready_and_keeps_the_view_until_it_exits(
        engine: Engine, image: str, s3: S3Server, tmp_path: Path) -> None:
    """sidecar.native=false keeps the native sidecar's promises. The trainer starts only once
    epoch 0 can be cut (the downloads throttled so that it can be only seconds after the mount:
    a trainer started at the mount found no epoch-0/), and on the pod's SIGTERM, sent to both
    containers at once, the view stays up while the trainer saves its checkpoint (the sidecar
    unmounted it at once: ENOTCONN); then both exit 0 and nothing stays mounted."""
    put_objects(s3, BUCKET, OBJECTS)
    repository, tag = image.rsplit(":", 1)
    values = epochfs_values(image, s3, native=False, nodes=1, port=free_port())
    values["sidecar"].update(minSamples=40, env=[{"name": "EPOCHFS_MAX_RATE", "value": "256Ki"}])
    values["trainer"] = {"image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
                         "command": ["python", "-c", LEGACY_TRAINER]}
    [(spec, identity)] = job_pods(one(render(helm_binary(), values, tmp_path), "Job"))
    pod = start(tmp_path, engine, spec, identity, "pod")
    try:
        reading = pod.host_path("trainer", "/tmp") / "reading"

        def started() -> bool:
            state = pod.state("trainer")
            assert state["Running"] or reading.exists(), \
                f"trainer exited {state['ExitCode']}:\n{pod.logs('trainer')}"
            return reading.exists()

        wait_until(started, timeout=120, interval=0.1, what="the trainer in epoch-0")
        held = re.search(r"at start, epoch-0 holds (\d+) files", pod.logs("trainer"))
        assert held and int(held[1]) >= 40, pod.logs("trainer")
        began = time.monotonic()
        codes = pod.terminate()
        log = pod.logs("trainer")
        after = re.search(r"after SIGTERM, epoch-0 holds (\d+) files", log)
        assert after and int(after[1]) >= 40, log
        assert codes == {"epochfs": 0, "trainer": 0}, (codes, log, pod.logs("epochfs")[-4000:])
        assert time.monotonic() - began < pod.grace
        assert pod.leftover_mounts() == []
    finally:
        print(f"--- sidecar log ---\n{pod.logs('epochfs')}\n--- trainer log ---\n{pod.logs('trainer')}")
        pod.cleanup()


def test_the_attach_examples_pod_works_the_same(engine: Engine, image: str, s3: S3Server,
                                                 tmp_path: Path) -> None:
    """The plain Pod of examples/kubernetes (epochfs attached to a user's own Pod through the
    chart's named templates) runs like the chart's Job."""
    put_objects(s3, BUCKET, OBJECTS)
    port = free_port()
    manifest = render_pod_snippet(
        helm_binary(), epochfs_values(image, s3, native=True, nodes=1, port=port), tmp_path,
        parent_values={"trainer": {"image": image, "imagePullPolicy": "Never",
                                   "command": ["python", "-c", TRAINER_SCRIPT], "args": ["crash"]},
                       "pod": {"shardIndex": 0}})
    meta = manifest["metadata"]
    identity = PodIdentity(name=meta["name"], namespace=meta.get("namespace", "default"),
                           labels=dict(meta.get("labels") or {}),
                           annotations=dict(meta.get("annotations") or {}))
    pod = start(tmp_path, engine, manifest["spec"], identity, "pod")
    try:
        crash_and_end(pod, port)
    finally:
        print(f"--- sidecar log ---\n{pod.logs('epochfs')}\n--- trainer log ---\n{pod.logs('trainer')}")
        pod.cleanup()


def user_pod(image: str) -> dict[str, Any]:
    """A pod a platform team writes, knowing nothing of epochfs but the annotation: one restricted
    container (the trainer script) and its own /tmp."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "resnet-0", "namespace": "research", "labels": {"app": "resnet"},
                     "annotations": {"epochfs.io/inject": "true"}},
        "spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "trainer", "image": image, "imagePullPolicy": "Never",
                "command": ["python", "-c", TRAINER_SCRIPT], "args": ["crash"],
                "env": [{"name": "HOME", "value": "/tmp"}],
                "securityContext": {"runAsUser": TRAINER_UID, "runAsGroup": TRAINER_UID, "runAsNonRoot": True,
                                    "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                    "readOnlyRootFilesystem": True},
                "volumeMounts": [{"name": "scratch", "mountPath": "/tmp"}],
            }],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
        },
    }


def test_a_pod_the_webhook_injected_works_the_same(engine: Engine, image: str, s3: S3Server,
                                                    tmp_path: Path) -> None:
    """The webhook's way in (issue 23), through the real server: the chart (webhook.enabled, this
    test's values) rendered; its webhook Deployment's pod run from the same image with the
    rendered profiles ConfigMap and TLS Secret (tests/webhook_container.py); a user's Pod that
    carries only the annotation sent to it as an AdmissionReview v1 over HTTPS, its certificate
    verified with the configuration's caBundle; the JSONPatch applied and the result validated
    (kubernetes-validate); the mutated pod sent again gets no patch; and the mutated pod runs like
    the chart's Job: byte-exact epochs, the trainer confined (its fsGroup now the one the webhook
    added), kill -9 of the FUSE server, SIGTERM exit 0."""
    put_objects(s3, BUCKET, OBJECTS)
    port = free_port()
    objs = render(helm_binary(), webhook_values(epochfs_values(image, s3, native=True, nodes=1, port=port)),
                  tmp_path)
    pod_obj = user_pod(image)
    with running_webhook(engine, objs, tmp_path / "webhook") as webhook:
        mutated = jsonpatch.apply_patch(pod_obj, json_patch(webhook.review(pod_obj)))
        assert json_patch(webhook.review(mutated)) == []  # idempotent: a pod mutated twice is unchanged
    assert "securityContext" not in pod_obj["spec"]
    assert mutated["spec"]["securityContext"]["fsGroup"] == TRAINER_UID
    validate_k8s(mutated)
    meta = mutated["metadata"]
    identity = PodIdentity(name=meta["name"], namespace=meta["namespace"], labels=dict(meta["labels"]),
                           annotations=dict(meta["annotations"]))
    pod = start(tmp_path, engine, mutated["spec"], identity, "pod")
    try:
        crash_and_end(pod, port)
    finally:
        print(f"--- sidecar log ---\n{pod.logs('epochfs')}\n--- trainer log ---\n{pod.logs('trainer')}")
        pod.cleanup()


def test_folder_view_pod_is_restricted_and_works_unprivileged(engine: Engine, image: str, s3: S3Server,
                                                             tmp_path: Path) -> None:
    """sidecar.view=folder: the pod passes the Restricted Pod Security Standard as rendered, the
    sidecar runs as 10001 with no capability, no_new_privs and a read-only root; the trainer
    reads epoch 0 (asked for over the loopback port, as the torch client does) byte for byte and
    every write it tries is refused; kill -9 of the publisher, and the same trainer reads epoch 1
    within seconds; SIGTERM: exit 0, nothing mounted."""
    from pss import violations

    put_objects(s3, BUCKET, OBJECTS)
    port = free_port()
    manifest = job(tmp_path, image, s3, native=True, nodes=1, port=port, mode="folder", view="folder")
    [(spec, identity)] = job_pods(manifest)
    assert violations(spec, manifest["spec"]["template"].get("metadata")) == []
    pod = start(tmp_path, engine, spec, identity, "pod")
    try:
        probe = ("import json, os\n"
                 "st = dict(l.rstrip('\\n').split(':\\t', 1)\n"
                 "          for l in open('/proc/1/status') if ':\\t' in l)\n"
                 "root = next(l.split()[5] for l in open('/proc/1/mountinfo') if l.split()[4] == '/')\n"
                 "print(json.dumps({'uid': os.getuid(), 'cap_eff': st['CapEff'].strip(),"
                 " 'cap_bnd': st['CapBnd'].strip(), 'nnp': st['NoNewPrivs'].strip(), 'root': root}))")
        who = json.loads(pod.exec("epochfs", "python", "-c", probe).stdout)
        assert who["uid"] == 10001 and int(who["cap_eff"], 16) == 0 and who["nnp"] == "1", who
        assert "ro" in who["root"].split(","), who
        env = trainer_env(pod)
        tmp = pod.host_path("trainer", "/tmp")
        first = result(pod, tmp, "result-0.json", 120)
        check_epoch(first, env["EPOCHFS_CACHE"])
        check_trainer_confined(first)
        assert any(k.startswith("cut 200") for k in first["errors"]), first["errors"]  # it asked
        publisher = health(port)["children"]["publisher"]["pid"]
        pod.exec("epochfs", "python", "-c", f"import os, signal; os.kill({publisher}, signal.SIGKILL)")
        killed = time.monotonic()
        (tmp / "go-1").touch()
        second = result(pod, tmp, "result-1.json", 90)
        check_epoch(second, env["EPOCHFS_CACHE"])
        assert second["epoch"] == 1 and time.monotonic() - killed < 10, second
        assert health(port)["children"]["publisher"]["pid"] != publisher
        end(pod, fuse=False)
    finally:
        print(f"--- sidecar log ---\n{pod.logs('epochfs')}\n--- trainer log ---\n{pod.logs('trainer')}")
        pod.cleanup()


def test_two_node_job_pods_read_their_own_shards(engine: Engine, image: str, s3: S3Server,
                                                  tmp_path: Path) -> None:
    from epochfs.sidecar.keyorder import shard_of

    put_objects(s3, BUCKET, OBJECTS)
    pods = job_pods(job(tmp_path, image, s3, native=True, nodes=2, port=free_port(), mode="read"))
    assert len(pods) == 2
    seen: list[set[str]] = []
    # One after the other: on the host network both sidecars would want the same port.
    for index, (spec, identity) in enumerate(pods):
        shard = {k for k in OBJECTS if shard_of(k, 2) == index}
        pod = start(tmp_path, engine, spec, identity, f"pod-{index}")
        try:
            env = trainer_env(pod)
            first = result(pod, pod.host_path("trainer", "/tmp"), "result-0.json", 120)
            check_epoch(first, env["EPOCHFS_CACHE"], keys=shard)
            seen.append(set(first["files"]))
            end(pod)
        finally:
            print(f"--- pod {index} sidecar log ---\n{pod.logs('epochfs')}")
            pod.cleanup()
    assert seen[0] and seen[1] and not seen[0] & seen[1]


def _layer_names(engine: Engine, image: str) -> list[set[str]]:
    """The file names each layer of the image adds (docker save, read as a stream)."""
    proc = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE,
                            env={**os.environ, "DOCKER_HOST": engine.docker.host})
    assert proc.stdout is not None
    layers = []
    with tarfile.open(fileobj=proc.stdout, mode="r|") as outer:
        for member in outer:
            inner = outer.extractfile(member) if member.isfile() else None
            if not isinstance(inner, io.BufferedReader):
                continue
            head = inner.peek(262)[257:262]
            if head == b"ustar":  # a layer (blobs/sha256/...); the config and manifests are JSON
                with tarfile.open(fileobj=inner, mode="r|") as layer:
                    layers.append({m.name.lstrip("./") for m in layer})
    assert proc.wait() == 0
    return layers


def test_image_pins_gcsfs_and_no_build_leftovers(engine: Engine, image: str) -> None:
    docker = engine.docker
    config: dict[str, Any] = docker.inspect(image)["Config"]
    assert config["User"] == "10001:10001" and config["Entrypoint"] == ["epochfs", "sidecar"]
    probe = ("import importlib.metadata as m, json, gcsfs, epochfs.sidecar.cli\n"
             "from epochfs.fuse.libfuse import find_libfuse3\n"
             "print(json.dumps({'dists': {d.metadata['Name']: d.version for d in m.distributions()},"
             " 'libfuse': find_libfuse3(),"
             " 'license': m.distribution('epochfs').read_text('licenses/LICENSE')}))")
    out = json.loads(docker("run", "--rm", "--network", "host", "--entrypoint", "python", image, "-c",
                            probe).stdout)
    assert re.fullmatch(r"/\S+/libfuse3\.so\.\d+", out["libfuse"]), out["libfuse"]
    assert out["license"] == (ROOT / "LICENSE").read_text()  # pyproject's license-files, installed

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    pins = dict(line.split("==") for line in (ROOT / "docker" / "constraints.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    installed = {norm(k): v for k, v in out["dists"].items() if norm(k) != "epochfs"}
    expected = {k: v for k, v in pins.items() if k != "setuptools"}  # the build backend left
    assert installed == expected
    no_pip = docker("run", "--rm", "--entrypoint", "python", image, "-m", "pip", "--version", check=False)
    assert no_pip.returncode != 0 and "No module named pip" in no_pip.stderr

    layers = _layer_names(engine, image)
    assert layers, "docker save gave no layers"
    everything = set().union(*layers)
    assert not any(re.match(r"(tmp/)?wheels/", n) for n in everything)
    assert not any(n.startswith("opt/epochfs/") and "/site-packages/pip/" in n for n in everything)
    assert sum(1 for layer in layers if "opt/epochfs/bin/epochfs" in layer) == 1


def tiny_pod(engine: Engine, image: str, root: Path, name: str) -> Pod:
    """A one-container pod that prints and exits 0: enough to hit a container name conflict."""
    spec = {"containers": [{"name": "main", "image": image, "command": ["python", "-c", "print('ok')"]}]}
    return Pod(engine.docker, spec, PodIdentity(name=name), root / name)


def test_what_an_interrupted_run_left_does_not_break_the_next(engine: Engine, image: str,
                                                              tmp_path: Path) -> None:
    """An earlier run killed part way: its containers stay in the kept data root (one still
    running, its shim alive), and its dockerd, SIGKILLed, leaves the data root bind-mounted onto
    itself and the running container's root filesystem mounted. The next engine start unmounts
    those and removes every container, so a pod with the same container names starts; a
    container with a pod's name made while the engine runs is removed by the pod's start."""
    pod = tiny_pod(engine, image, tmp_path, "resnet-0")
    left = engine.docker("create", "--network", "host", "--name", pod.name_of("main"), image).stdout.strip()
    running = engine.docker("run", "-d", "--network", "host", "--stop-timeout", "1", "--name",
                            pod.name_of("sleeper"), "--entrypoint", "python", image, "-c",
                            "import time; time.sleep(600)").stdout.strip()
    assert engine.proc is not None
    engine.proc.kill()  # SIGKILL: dockerd undoes none of its mounts
    engine.proc.wait()
    engine.proc = None
    points = mount_points(engine.cache)
    assert str(engine.cache / "data") in points and any(p.endswith("/merged") for p in points), points

    engine.start()
    try:
        pod.start(timeout=60)  # docker run --name resnet-0-main: no Conflict
        assert pod.wait(60) == {"main": 0}
    finally:
        pod.cleanup()
    assert not {left, running} & set(engine.docker("ps", "-aq", "--no-trunc").stdout.split())

    again = tiny_pod(engine, image, tmp_path, "resnet-1")
    stale = engine.docker("create", "--network", "host", "--name", again.name_of("main"),
                          image).stdout.strip()
    try:
        again.start(timeout=60)
        assert again.wait(60) == {"main": 0}
        assert stale not in engine.docker("ps", "-aq", "--no-trunc").stdout.split()
    finally:
        again.cleanup()


def test_a_dockerd_that_ignores_sigterm_is_killed_and_leaves_no_mount(engine: Engine) -> None:
    """Engine.stop on a dockerd that neither answers nor exits (SIGSTOP here): it is killed after
    the timeout and what it left mounted under the cache is unmounted; the engine then starts
    again for the tests after this one."""
    assert engine.proc is not None
    engine.proc.send_signal(signal.SIGSTOP)
    began = time.monotonic()
    engine.stop(timeout=3)
    assert engine.proc is None and time.monotonic() - began < 30
    assert mount_points(engine.cache) == []
    engine.start()
