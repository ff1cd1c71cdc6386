"""Run a Kubernetes pod spec with docker, container by container, as a kubelet would.

Why: the chart's pods must work in a real container runtime (volumes and mount propagation,
users, read-only roots, privileges), and no cluster is available to the tests. ``Pod`` takes any
pod spec dict (the Job's template from `helm template`, a Pod snippet) and turns each container
into one `docker run`: the env the kubelet would build (tests/pod_env.py), the volumes as host
folders in one rshared pod folder (tests/pod_volumes.py), `Bidirectional` → rshared,
`HostToContainer` → rslave, readOnly → a read-only bind, subPath/subPathExpr, runAsUser/
runAsGroup/fsGroup/supplementalGroups → --user/--group-add, readOnlyRootFilesystem → --read-only,
capabilities, seccomp, allowPrivilegeEscalation: false → no-new-privileges, privileged →
--privileged through the `epochfs-runc` runtime (scripts/runc-wrapper), memory and CPU limits.
Every container shares the host network, as the containers of one pod share one network.

Order and lifetime follow the kubelet: init containers one by one; a native sidecar (an init
container with restartPolicy Always) keeps running and the next one starts once its startupProbe
succeeds (probed every 0.2 s rather than every periodSeconds, with the kubelet's deadline); then
the regular containers together. ``terminate`` is the pod's end: SIGTERM to the regular
containers, then to the sidecars in reverse order, each `docker stop -t` with what is left of
terminationGracePeriodSeconds. Restarts (restartPolicy, liveness) are not emulated: a container
that exits stays exited, so the tests see every crash. Fields that would change behaviour and are
not emulated are refused (PodError) rather than ignored.
"""

from __future__ import annotations

import copy
import http.client
import logging
import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from container_engine import RUNTIME, Docker
from pod_env import PodError, PodIdentity, PodObjects, container_env, expand, quantity
from pod_volumes import PodVolumes

POD_FIELDS = {
    "containers", "initContainers", "volumes", "securityContext", "terminationGracePeriodSeconds",
    "restartPolicy", "serviceAccountName", "serviceAccount", "automountServiceAccountToken",
    "enableServiceLinks", "subdomain", "hostname", "nodeSelector", "tolerations", "affinity",
    "priorityClassName", "imagePullSecrets", "schedulerName", "dnsPolicy", "dnsConfig",
    "topologySpreadConstraints", "hostNetwork", "activeDeadlineSeconds", "priority",
    "preemptionPolicy", "setHostnameAsFQDN", "nodeName",
}
CONTAINER_FIELDS = {
    "name", "image", "imagePullPolicy", "command", "args", "workingDir", "env", "envFrom", "ports",
    "resources", "securityContext", "volumeMounts", "startupProbe", "readinessProbe",
    "livenessProbe", "restartPolicy", "terminationMessagePath", "terminationMessagePolicy",
    "stdin", "stdinOnce", "tty",
}
PROPAGATION = {None: "rprivate", "None": "rprivate", "HostToContainer": "rslave", "Bidirectional": "rshared"}
LABEL = "io.epochfs.ct.pod"
log = logging.getLogger(__name__)


def job_pods(job: dict[str, Any]) -> list[tuple[dict[str, Any], PodIdentity]]:
    """The pods a Job controller would create: (spec, identity) per completion index (Indexed:
    the completion-index annotation and label, hostname <job>-<i>) or per parallel pod."""
    meta = job["metadata"]
    template = job["spec"]["template"]
    indexed = job["spec"].get("completionMode") == "Indexed"
    pods = []
    for i in range(int(job["spec"].get("parallelism", 1))):
        labels = dict(template.get("metadata", {}).get("labels") or {})
        annotations = dict(template.get("metadata", {}).get("annotations") or {})
        labels["job-name"] = meta["name"]
        if indexed:
            labels["batch.kubernetes.io/job-completion-index"] = str(i)
            annotations["batch.kubernetes.io/job-completion-index"] = str(i)
        name = f"{meta['name']}-{i}-p{i:04d}" if indexed else f"{meta['name']}-p{i:04d}"
        identity = PodIdentity(name=name, namespace=meta.get("namespace", "default"), labels=labels,
                               annotations=annotations, node_name=f"node-{i}",
                               hostname=f"{meta['name']}-{i}" if indexed else name)
        pods.append((copy.deepcopy(template["spec"]), identity))
    return pods


def _security(spec: dict[str, Any], c: dict[str, Any]) -> dict[str, Any]:
    """The container's effective security context (container fields win over the pod's)."""
    pod = spec.get("securityContext") or {}
    own = c.get("securityContext") or {}
    merged = {k: pod[k] for k in ("runAsUser", "runAsGroup", "runAsNonRoot", "seccompProfile",
                                  "appArmorProfile") if k in pod}
    merged.update(own)
    return merged


def _user(sec: dict[str, Any], image_user: str, name: str) -> str | None:
    """--user for docker, and the kubelet's runAsNonRoot check against the image's user."""
    uid, gid = sec.get("runAsUser"), sec.get("runAsGroup")
    if uid is None:
        image_uid = image_user.partition(":")[0]
        uid_text = image_uid or "0"
        if sec.get("runAsNonRoot") and not uid_text.isdigit():
            raise PodError(f"{name}: runAsNonRoot and the image's user {image_user!r} is not numeric")
        effective = int(uid_text) if uid_text.isdigit() else None
        user = None if gid is None else f"{uid_text}:{gid}"
    else:
        effective = int(uid)
        user = str(uid) if gid is None else f"{uid}:{gid}"
    if sec.get("runAsNonRoot") and effective == 0:
        raise PodError(f"{name}: runAsNonRoot and the container would run as root")
    return user


def docker_run_args(c: dict[str, Any], spec: dict[str, Any], identity: PodIdentity,
                    volumes: PodVolumes, env: dict[str, str], *, image_user: str = "",
                    container_name: str) -> list[str]:
    """The `docker run` arguments for one container of the pod (detached, not started yet)."""
    unknown = set(c) - CONTAINER_FIELDS
    if unknown:
        raise PodError(f"{c['name']}: fields not emulated here: {sorted(unknown)}")
    sec = _security(spec, c)
    pod_sec = spec.get("securityContext") or {}
    args = ["run", "-d", "--name", container_name, "--label", f"{LABEL}={identity.name}",
            "--network", "host", "--pull", "never", "-e", f"HOSTNAME={identity.hostname or identity.name}"]
    for name, value in env.items():
        args += ["-e", f"{name}={value}"]
    user = _user(sec, image_user, c["name"])
    if user is not None:
        args += ["--user", user]
    groups = [pod_sec["fsGroup"]] if pod_sec.get("fsGroup") is not None else []
    for gid in [*groups, *pod_sec.get("supplementalGroups", [])]:
        args += ["--group-add", str(gid)]
    privileged = bool(sec.get("privileged"))
    if privileged:
        args += ["--privileged", "--runtime", RUNTIME]
    else:
        caps = sec.get("capabilities") or {}
        for cap in caps.get("drop", []):
            args += ["--cap-drop", cap]
        for cap in caps.get("add", []):
            args += ["--cap-add", cap]
        if sec.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        seccomp = (sec.get("seccompProfile") or {}).get("type", "Unconfined")  # the kubelet's default
        if seccomp == "Unconfined":
            args += ["--security-opt", "seccomp=unconfined"]
        elif seccomp == "Localhost":
            args += ["--security-opt", f"seccomp={sec['seccompProfile']['localhostProfile']}"]
        if (sec.get("appArmorProfile") or {}).get("type") == "Unconfined":
            args += ["--security-opt", "apparmor=unconfined"]
    if sec.get("readOnlyRootFilesystem"):
        args.append("--read-only")
    limits = (c.get("resources") or {}).get("limits") or {}
    if "memory" in limits:
        args += ["--memory", str(int(quantity(limits["memory"])))]
    if "cpu" in limits:
        args += ["--cpus", f"{quantity(limits['cpu']):g}"]
    if c.get("workingDir"):
        args += ["-w", c["workingDir"]]
    for m in c.get("volumeMounts", []):
        source = volumes.source(m, env)
        propagation = m.get("mountPropagation")
        if propagation == "Bidirectional" and not privileged:
            raise PodError(f"{c['name']}: Bidirectional mount propagation needs a privileged container")
        if "," in str(source) or "," in m["mountPath"]:
            raise PodError(f"{c['name']}: a comma in a mount path cannot be given to docker --mount")
        opts = (f"type=bind,source={source},target={m['mountPath']},"
                f"bind-propagation={PROPAGATION[propagation]}")
        if m.get("readOnly") or volumes.volumes[m["name"]].read_only:
            opts += ",readonly"
        args += ["--mount", opts]
    command = [expand(a, env) for a in c.get("command", [])]
    cargs = [expand(a, env) for a in c.get("args", [])]
    if command:
        args += ["--entrypoint", command[0], c["image"], *command[1:], *cargs]
    else:
        args += [c["image"], *cargs]
    return args


def _probe_once(probe: dict[str, Any], c: dict[str, Any], identity: PodIdentity,
                docker: Docker, container_name: str) -> bool:
    timeout = float(probe.get("timeoutSeconds", 1))
    if "httpGet" in probe or "tcpSocket" in probe:
        action = probe.get("httpGet") or probe["tcpSocket"]
        port = action["port"]
        if isinstance(port, str) and not port.isdigit():
            port = next(p["containerPort"] for p in c.get("ports", []) if p.get("name") == port)
        host = action.get("host") or identity.ip
        try:
            if "tcpSocket" in probe:
                socket.create_connection((host, int(port)), timeout=timeout).close()
                return True
            https = action.get("scheme") == "HTTPS"
            conn = (http.client.HTTPSConnection if https else http.client.HTTPConnection)(
                host, int(port), timeout=timeout)
            headers = {h["name"]: h["value"] for h in action.get("httpHeaders", [])}
            conn.request("GET", action.get("path", "/"), headers=headers)
            status = conn.getresponse().status
            conn.close()
            return 200 <= status < 400
        except OSError:
            return False
    if "exec" in probe:
        return docker("exec", container_name, *probe["exec"]["command"], check=False,
                      timeout=timeout + 5).returncode == 0
    raise PodError(f"{c['name']}: probe type {sorted(probe)} is not emulated here")


@dataclass
class Pod:
    """One pod on the private docker engine. ``start`` runs it up to its regular containers;
    ``wait``, ``terminate``, ``exit_codes``, ``logs`` and ``exec`` follow it; ``cleanup`` removes
    its containers and mounts (call it in a finally)."""

    docker: Docker
    spec: dict[str, Any]
    identity: PodIdentity
    root: Path
    objects: PodObjects = field(default_factory=PodObjects)
    node_root: Path | None = None
    started: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        unknown = set(self.spec) - POD_FIELDS
        if unknown:
            raise PodError(f"pod fields not emulated here: {sorted(unknown)}")
        if self.spec.get("shareProcessNamespace"):
            raise PodError("shareProcessNamespace is not emulated here")
        self.volumes = PodVolumes(self.root, self.spec, self.identity, self.objects,
                                  self.node_root or self.root / "node")
        self.grace = float(self.spec.get("terminationGracePeriodSeconds", 30))

    def name_of(self, container: str) -> str:
        return f"{self.identity.name}-{container}"

    @property
    def sidecars(self) -> list[str]:
        return [c["name"] for c in self.spec.get("initContainers", []) if c.get("restartPolicy") == "Always"]

    @property
    def regular(self) -> list[str]:
        return [c["name"] for c in self.spec["containers"]]

    def _run(self, c: dict[str, Any]) -> None:
        env = container_env(c, self.spec, self.identity, self.objects)
        image_user = str((self.docker.inspect(c["image"])["Config"] or {}).get("User") or "")
        args = docker_run_args(c, self.spec, self.identity, self.volumes, env, image_user=image_user,
                               container_name=self.name_of(c["name"]))
        self.started.append(c["name"])
        self.docker(*args)

    def state(self, container: str) -> dict[str, Any]:
        state: dict[str, Any] = self.docker.inspect(self.name_of(container))["State"]
        return state

    def _wait_started(self, c: dict[str, Any], deadline: float) -> None:
        probe = c.get("startupProbe")
        if probe:
            delay = float(probe.get("initialDelaySeconds", 0))
            budget = delay + float(probe.get("periodSeconds", 10)) * int(probe.get("failureThreshold", 3))
            deadline = min(deadline, time.monotonic() + budget)
        while True:
            state = self.state(c["name"])
            if not state["Running"]:
                raise PodError(f"{c['name']} exited ({state['ExitCode']}) before it started:\n"
                               f"{self.logs(c['name'])[-4000:]}")
            if probe is None or _probe_once(probe, c, self.identity, self.docker, self.name_of(c["name"])):
                return
            if time.monotonic() > deadline:
                raise PodError(f"{c['name']}: startupProbe still failing:\n{self.logs(c['name'])[-4000:]}")
            time.sleep(0.2)

    def _remove_stale(self) -> None:
        """Remove containers that already carry one of this pod's container names: left by an
        earlier run the engine start did not clean (Engine.start removes every container), they
        would make `docker run --name` fail with a Conflict."""
        containers = self.spec.get("initContainers", []) + self.spec["containers"]
        names = {self.name_of(c["name"]) for c in containers}
        found = self.docker("ps", "-a", "--format", "{{.ID}} {{.Names}}").stdout.split("\n")
        stale = [line.split()[0] for line in found if line.strip() and line.split()[1] in names]
        if stale:
            log.warning("pod %s: removing %d stale container(s) with its container names",
                        self.identity.name, len(stale))
            self.docker("rm", "-f", *stale)

    def start(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        self._remove_stale()
        self.volumes.setup()
        for c in self.spec.get("initContainers", []):
            self._run(c)
            if c.get("restartPolicy") == "Always":
                self._wait_started(c, deadline)
            else:
                code = self.wait_for(c["name"], deadline - time.monotonic())
                if code != 0:
                    raise PodError(f"init container {c['name']} exited {code}:\n"
                                   f"{self.logs(c['name'])[-4000:]}")
        for c in self.spec["containers"]:
            self._run(c)

    def wait_for(self, container: str, timeout: float) -> int:
        """Block until the container exits (docker wait) and return its exit code."""
        try:
            out = self.docker("wait", self.name_of(container), timeout=max(timeout, 1)).stdout
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{container} still running after {timeout:.0f}s:\n"
                               f"{self.logs(container)[-4000:]}") from None
        return int(out.strip().splitlines()[-1])

    def wait(self, timeout: float) -> dict[str, int]:
        """Exit codes of the regular containers, once all have exited."""
        deadline = time.monotonic() + timeout
        return {name: self.wait_for(name, deadline - time.monotonic()) for name in self.regular}

    def terminate(self) -> dict[str, int]:
        """The pod's end as the kubelet does it: SIGTERM to the running regular containers, then
        to the sidecars in reverse order, within terminationGracePeriodSeconds (then SIGKILL).
        Returns every started container's exit code."""
        deadline = time.monotonic() + self.grace
        stops = [subprocess.Popen(["docker", "stop", "-t", str(int(self.grace)), self.name_of(n)],
                                  env={**os.environ, "DOCKER_HOST": self.docker.host},
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                 for n in self.regular if n in self.started]
        for proc in stops:
            proc.wait(timeout=self.grace + 30)
        for name in reversed(self.sidecars):
            if name in self.started:
                left = max(0, int(deadline - time.monotonic()))
                self.docker("stop", "-t", str(left), self.name_of(name), timeout=left + 30)
        return self.exit_codes()

    def exit_codes(self) -> dict[str, int]:
        return {n: int(self.state(n)["ExitCode"]) for n in self.started}

    def logs(self, container: str) -> str:
        proc = self.docker("logs", self.name_of(container), check=False)
        return proc.stdout + proc.stderr

    def exec(self, container: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.docker("exec", self.name_of(container), *argv, check=check)

    def host_path(self, container: str, mount_path: str) -> Path:
        """The host folder behind one of a container's volumeMounts (subPath resolved)."""
        c = next(c for c in self.spec.get("initContainers", []) + self.spec["containers"]
                 if c["name"] == container)
        mount = next(m for m in c.get("volumeMounts", []) if m["mountPath"] == mount_path)
        return self.volumes.source(mount, container_env(c, self.spec, self.identity, self.objects))

    def leftover_mounts(self) -> list[str]:
        return self.volumes.leftover_mounts()

    def cleanup(self) -> None:
        mine = f"label={LABEL}={self.identity.name}"
        ids = self.docker("ps", "-aq", "--filter", mine, check=False).stdout.split()
        if ids:
            self.docker("rm", "-f", *ids, check=False)
        self.volumes.teardown()
