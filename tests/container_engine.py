"""A private Docker engine for the container test, and the two images it runs.

Why its own dockerd: the test must not depend on, or disturb, an engine the machine may already
run, and CI machines have none. This one has its own data root, exec root and socket, no bridge and
no iptables rules (every container uses the host network, which is all a pod on 127.0.0.1 needs),
and one extra runtime, ``epochfs-runc`` (scripts/runc-wrapper), through which privileged
containers run where the machine's capability bounding set is incomplete.

The data root is kept between runs in the cache folder (``EPOCHFS_CT_CACHE``, default
/var/tmp/epochfs-container-test), so the locally made base image and the epochfs image, both
tagged by a hash of their inputs, are built once; the exec root and socket are per run, and
``Engine.stop`` removes every container, stops dockerd (and its containerd) and unmounts what it
left in its exec root before returning.

A run that was interrupted (the machine restarted, pytest killed) leaves its containers in the
data root, and a killed dockerd leaves its mounts (the data root bind-mounted onto itself, the
exec root's network namespace, container root filesystems). ``Engine.start`` therefore stops a
dockerd still running on this cache, unmounts everything under the cache folder, and once the new
dockerd answers removes every container it knows, so a run never trips over an earlier one's
container names.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pod_volumes import mount_points

ROOT = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("EPOCHFS_CT_CACHE", "/var/tmp/epochfs-container-test"))
RUNTIME = "epochfs-runc"
log = logging.getLogger(__name__)
# What the Dockerfile's build context holds (.dockerignore): the image tag hashes these.
IMAGE_INPUTS = ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md", "docker", "sidecar",
                "fuse", "torchclient")


@dataclass
class Docker:
    """The docker CLI pointed at one engine's socket."""

    host: str

    def __call__(self, *args: str, check: bool = True, timeout: float = 120,
                 input: str | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                              input=input, env={**os.environ, "DOCKER_HOST": self.host})
        if check and proc.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args)[:300]} failed ({proc.returncode}):\n"
                               f"{(proc.stdout + proc.stderr)[-3000:]}")
        return proc

    def image_exists(self, ref: str) -> bool:
        return self("image", "inspect", ref, check=False).returncode == 0

    def inspect(self, ref: str) -> dict[str, Any]:
        value: list[dict[str, Any]] = json.loads(self("inspect", ref).stdout)
        return value[0]


@dataclass
class Engine:
    """dockerd with private state under ``cache``; ``start`` waits until it answers."""

    cache: Path = CACHE
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def socket(self) -> Path:
        return self.cache / "docker.sock"

    @property
    def pidfile(self) -> Path:
        return self.cache / "dockerd.pid"

    @property
    def docker(self) -> Docker:
        return Docker(f"unix://{self.socket}")

    def _stop_leftover(self) -> None:
        """A dockerd of an earlier run of this test that was itself killed, and the containerd
        it started: each found by its pid file, stopped if it still runs, and the file removed.
        A new dockerd that finds containerd's pid file with a live pid (the old containerd still
        shutting down, or the pid reused) waits for that one instead of starting its own, and
        gives up with "timeout waiting for containerd to start"."""
        marker = str(self.cache).encode()
        for pidfile, program in ((self.pidfile, b"dockerd"),
                                 (self.cache / "exec" / "containerd" / "containerd.pid", b"containerd")):
            try:
                pid = int(pidfile.read_text())
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except (OSError, ValueError):
                cmdline = []
            if cmdline and cmdline[0].endswith(program) and marker in b" ".join(cmdline):
                log.warning("stopping %s %d left by an earlier run on %s", program.decode(), pid, self.cache)
                os.kill(pid, signal.SIGTERM)
                _wait_gone(pid, 60)
            pidfile.unlink(missing_ok=True)

    def _unmount_exec_root(self) -> None:
        """dockerd leaves its default network namespace bind-mounted in the exec root, even when
        it exits cleanly."""
        unmount_all(self.cache / "exec")

    def _unmount_leftovers(self) -> None:
        """What a killed dockerd left mounted under the cache folder: its data root bind-mounted
        onto itself (it undoes that only on a clean shutdown), the exec root's network namespace,
        container root filesystems. Only called while no dockerd of this cache runs."""
        points = mount_points(self.cache)
        if points:
            log.warning("unmounting %d mount(s) a killed dockerd left under %s: %s",
                        len(points), self.cache, sorted(set(points)))
        unmount_all(self.cache)

    def _remove_leftover_containers(self) -> None:
        """Containers of an earlier, interrupted run stay in the kept data root; their names would
        make the next `docker run --name` fail with a Conflict."""
        ids = self.docker("ps", "-aq").stdout.split()
        if ids:
            log.warning("removing %d container(s) left in %s by an earlier run", len(ids), self.cache)
            self.docker("rm", "-f", *ids, timeout=120)

    def start(self, timeout: float = 60) -> Engine:
        self.cache.mkdir(parents=True, exist_ok=True)
        self._stop_leftover()
        self._unmount_leftovers()
        config = self.cache / "daemon.json"  # not the machine's /etc/docker/daemon.json
        config.write_text("{}\n")
        log_file = (self.cache / "dockerd.log").open("wb")
        self.proc = subprocess.Popen(
            ["dockerd", "--config-file", str(config), "--bridge=none", "--iptables=false",
             "--ip6tables=false", "--data-root", str(self.cache / "data"),
             "--exec-root", str(self.cache / "exec"), "-H", f"unix://{self.socket}",
             "--pidfile", str(self.pidfile),
             # Where a system containerd runs (dockerd then uses it), stay out of the namespaces
             # of the machine's own dockerd.
             "--containerd-namespace", "epochfs-ct", "--containerd-plugins-namespace", "epochfs-ct-plugins",
             "--add-runtime", f"{RUNTIME}={ROOT / 'scripts' / 'runc-wrapper'}"],
            stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
        )
        log_file.close()
        try:
            self._wait_answering(timeout)
            self._remove_leftover_containers()
        except BaseException:
            self.stop()  # no dockerd of a failed start stays behind
            raise
        return self

    def _answers(self) -> bool:
        # A container an earlier run left running is stopped (10 s of SIGTERM, then SIGKILL)
        # while dockerd loads its containers, before it serves its API: a call may block that long.
        try:
            return self.docker("version", check=False, timeout=10).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def _wait_answering(self, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dockerd did not start:\n{self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return (self.cache / "dockerd.log").read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self, timeout: float = 60) -> None:
        """Remove every container of this engine, then stop dockerd and wait for it (``timeout``
        seconds for each step). A dockerd that does not answer or exit in time is killed, and
        what it then leaves mounted under the cache is unmounted here."""
        if self.proc is None:
            return
        killed = False
        if self.proc.poll() is None:
            try:
                ids = self.docker("ps", "-aq", check=False, timeout=timeout).stdout.split()
                if ids:
                    self.docker("rm", "-f", *ids, check=False, timeout=max(timeout, 120))
            except subprocess.TimeoutExpired:
                log.warning("dockerd on %s did not answer within %.0f s; stopping it anyway",
                            self.socket, timeout)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log.warning("dockerd on %s did not exit within %.0f s of SIGTERM; killing it",
                            self.socket, timeout)
                self.proc.kill()
                self.proc.wait()
                killed = True
        else:
            killed = self.proc.returncode != 0
        self.proc = None
        if killed:
            self._unmount_leftovers()
        else:
            self._unmount_exec_root()


def unmount_all(under: Path, rounds: int = 5) -> None:
    """Unmount every mount at or below ``under``, deepest first; stacked mounts need one umount
    each, and a busy one is detached lazily (umount -l) so the next start finds nothing."""
    for _ in range(rounds):
        points = mount_points(under)
        if not points:
            return
        for point in sorted(set(points), key=len, reverse=True):
            if subprocess.run(["umount", point], capture_output=True, timeout=60).returncode != 0:
                subprocess.run(["umount", "-l", point], capture_output=True, timeout=60)


def _alive(pid: int) -> bool:
    """Whether the process runs (a zombie waiting for a parent that does not reap it does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _wait_gone(pid: int, timeout: float) -> None:
    """Wait for a process that is not our child to exit; SIGKILL it after ``timeout``."""
    deadline = time.monotonic() + timeout
    killed = False
    while _alive(pid):
        if time.monotonic() > deadline and not killed:
            os.kill(pid, signal.SIGKILL)
            killed = True
            deadline += 10
        elif killed and time.monotonic() > deadline:
            raise RuntimeError(f"process {pid} still there 10 s after SIGKILL")
        time.sleep(0.1)


def base_image(docker: Docker, cache: Path = CACHE) -> str:
    """The locally made Debian trixie base (scripts/container-base.sh), built once per inputs."""
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "container-base.sh"), str(cache)],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "DOCKER_HOST": docker.host})
    if proc.returncode != 0:
        raise RuntimeError(f"container-base.sh failed:\n{proc.stderr[-4000:]}")
    return proc.stdout.strip().splitlines()[-1]


def inputs_digest(base: str) -> str:
    """A hash of the build context's files (those .dockerignore lets in) and the base tag."""
    h = hashlib.sha256(base.encode())
    for top in IMAGE_INPUTS:
        path = ROOT / top
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for f in files:
            if "__pycache__" in f.parts or f.suffix == ".pyc":
                continue
            h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def epochfs_image(docker: Docker, base: str, cache: Path = CACHE) -> str:
    """The sidecar image from the repository's Dockerfile on ``base``, built once per inputs.

    The legacy builder (DOCKER_BUILDKIT=0) is used because Debian's docker.io ships no buildx; the
    build runs on the host network, where the package index is reachable."""
    tag = f"epochfs-ct/epochfs:{inputs_digest(base)}"
    if docker.image_exists(tag):
        return tag
    build_log = cache / "image-build.log"
    with build_log.open("w") as out:
        proc = subprocess.run(
            ["docker", "build", "--network", "host", "--build-arg", f"BASE={base}", "-t", tag, str(ROOT)],
            stdout=out, stderr=subprocess.STDOUT, timeout=1800,
            env={**os.environ, "DOCKER_HOST": docker.host, "DOCKER_BUILDKIT": "0"},
        )
    if proc.returncode != 0:
        raise RuntimeError(f"docker build failed ({proc.returncode}):\n{build_log.read_text()[-5000:]}")
    # Keep the cache to one epochfs image: older builds of it, and the untagged build stages
    # (the layer cache of the next build keeps what it can reuse), go.
    repo = tag.split(":")[0]
    old = [ref for ref in docker("images", "--format", "{{.Repository}}:{{.Tag}}", repo).stdout.split()
           if ref != tag]
    if old:
        docker("rmi", *old, check=False)
    docker("image", "prune", "-f", check=False)
    return tag
