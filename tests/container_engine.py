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
"""

from __future__ import annotations

import hashlib
import json
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
        """A dockerd of an earlier run of this test that was itself killed (its pidfile remains)."""
        try:
            pid = int(self.pidfile.read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            return
        if cmdline and cmdline[0].endswith(b"dockerd") and str(self.socket).encode() in b" ".join(cmdline):
            os.kill(pid, signal.SIGTERM)
            _wait_gone(pid, 60)

    def _unmount_exec_root(self) -> None:
        """dockerd leaves its default network namespace bind-mounted in the exec root."""
        for point in sorted(set(mount_points(self.cache / "exec")), key=len, reverse=True):
            subprocess.run(["umount", point], capture_output=True, timeout=60)

    def start(self, timeout: float = 60) -> Engine:
        self.cache.mkdir(parents=True, exist_ok=True)
        self._stop_leftover()
        self._unmount_exec_root()
        config = self.cache / "daemon.json"  # not the machine's /etc/docker/daemon.json
        config.write_text("{}\n")
        log = (self.cache / "dockerd.log").open("wb")
        self.proc = subprocess.Popen(
            ["dockerd", "--config-file", str(config), "--bridge=none", "--iptables=false",
             "--ip6tables=false", "--data-root", str(self.cache / "data"),
             "--exec-root", str(self.cache / "exec"), "-H", f"unix://{self.socket}",
             "--pidfile", str(self.pidfile),
             # Where a system containerd runs (dockerd then uses it), stay out of the namespaces
             # of the machine's own dockerd.
             "--containerd-namespace", "epochfs-ct", "--containerd-plugins-namespace", "epochfs-ct-plugins",
             "--add-runtime", f"{RUNTIME}={ROOT / 'scripts' / 'runc-wrapper'}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while self.docker("version", check=False, timeout=10).returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"dockerd did not start:\n{self.log_tail()}")
            time.sleep(0.2)
        return self

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return (self.cache / "dockerd.log").read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Remove every container of this engine, then stop dockerd and wait for it."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            ids = self.docker("ps", "-aq", check=False).stdout.split()
            if ids:
                self.docker("rm", "-f", *ids, check=False, timeout=120)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        self._unmount_exec_root()


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists():
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            return
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
    log = cache / "image-build.log"
    with log.open("w") as out:
        proc = subprocess.run(
            ["docker", "build", "--network", "host", "--build-arg", f"BASE={base}", "-t", tag, str(ROOT)],
            stdout=out, stderr=subprocess.STDOUT, timeout=1800,
            env={**os.environ, "DOCKER_HOST": docker.host, "DOCKER_BUILDKIT": "0"},
        )
    if proc.returncode != 0:
        raise RuntimeError(f"docker build failed ({proc.returncode}):\n{log.read_text()[-5000:]}")
    # Keep the cache to one epochfs image: older builds of it, and the untagged build stages
    # (the layer cache of the next build keeps what it can reuse), go.
    repo = tag.split(":")[0]
    old = [ref for ref in docker("images", "--format", "{{.Repository}}:{{.Tag}}", repo).stdout.split()
           if ref != tag]
    if old:
        docker("rmi", *old, check=False)
    docker("image", "prune", "-f", check=False)
    return tag
