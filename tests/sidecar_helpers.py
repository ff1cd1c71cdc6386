"""Helpers for sidecar tests: run ``epochfs sidecar`` for real against moto and always clean up.

``running_sidecar`` starts the real CLI in a subprocess, waits until ``/readyz`` answers 200, and on
the way out sends SIGTERM, checks the exit status and that nothing is left mounted, and prints the
supervisor's log (which holds both children's prefixed logs) when the test body failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import free_port, wait_until

from epochfs.fuse.mounting import find_mount, lazy_unmount

EPOCHFS = [sys.executable, "-m", "epochfs.sidecar.cli"]


@dataclass
class Sidecar:
    """A running ``epochfs sidecar``."""

    proc: subprocess.Popen[bytes]
    mount: Path
    cache: Path
    port: int
    log: Path
    exit_code: int | None = field(default=None)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.base + path, timeout=10) as r:
                return int(r.status), r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
        except OSError:
            return 0, b""

    def health(self) -> dict[str, Any]:
        code, body = self.get("/healthz")
        doc = json.loads(body) if body else {}
        doc["code"] = code
        return doc

    def child_pid(self, name: str) -> int | None:
        children = self.health().get("children", {})
        child = children.get(name, {})
        return child.get("pid") if child.get("alive") else None

    def metrics(self) -> str:
        code, body = self.get("/metrics")
        assert code == 200, body
        return body.decode()

    def gauges(self) -> dict[str, float]:
        """The unlabelled samples of one scrape of ``/metrics``, and the ``ok`` fetches
        (``epochfs_remote_objects_total{result="ok"}``) as ``fetched``."""
        from prometheus_client.parser import text_string_to_metric_families

        out: dict[str, float] = {}
        for family in text_string_to_metric_families(self.metrics()):
            for s in family.samples:
                if not s.labels:
                    out[s.name] = float(s.value)
                elif s.name == "epochfs_remote_objects_total" and s.labels == {"result": "ok"}:
                    out["fetched"] = float(s.value)
        return out

    def metric(self, name: str, **labels: str) -> float | None:
        """One sample's value from /metrics (None when absent)."""
        from prometheus_client.parser import text_string_to_metric_families

        for family in text_string_to_metric_families(self.metrics()):
            for s in family.samples:
                if s.name == name and s.labels == labels:
                    return float(s.value)
        return None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.exit_code = self.proc.returncode
        return self.exit_code


def file_remote(tmp_path: Path, *, count: int = 6, size: int = 512) -> str:
    """A ``file://`` remote of ``count`` random samples of ``size`` bytes under ``train/``."""
    data = tmp_path / "data" / "train"
    data.mkdir(parents=True)
    for i in range(count):
        (data / f"{i:03d}.bin").write_bytes(os.urandom(size))
    return (tmp_path / "data").as_uri()


def sidecar_argv(*, remote: str, endpoint: str, cache: Path, mount: Path, port: int,
                 extra: tuple[str, ...] = ()) -> list[str]:
    return [*EPOCHFS, "--log-level", "INFO", "sidecar", "--remote", remote, "--endpoint-url", endpoint,
            "--cache", str(cache), "--mount", str(mount), "--health-port", str(port), *extra]


def leftover_mounts(*paths: Path) -> list[str]:
    return [str(p) for p in paths if find_mount(p) is not None]


def cleanup_mounts(*paths: Path) -> None:
    for p in paths:
        for _ in range(4):
            if find_mount(p) is None:
                break
            lazy_unmount(p, any_kind=True)


@contextlib.contextmanager
def running_sidecar(
    tmp_path: Path, *, remote: str, endpoint: str, extra: tuple[str, ...] = (),
    ready_timeout: float = 60.0, expect_ready: bool = True, expect_exit: int = 0,
    mount: Path | None = None,
) -> Iterator[Sidecar]:
    """Start the sidecar; yield once ready; stop it with SIGTERM and check a clean exit.

    ``mount``: where the view goes (default ``tmp_path/mnt``, made here); a given path is left for
    the sidecar to create, as a subdirectory of a pod's shared volume is."""
    cache = tmp_path / "cache"
    if mount is None:
        mount = tmp_path / "mnt"
        with contextlib.suppress(FileExistsError):  # a dead mount there fails even lexists()
            mount.mkdir()
    port = free_port()
    log = tmp_path / "sidecar.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            sidecar_argv(remote=remote, endpoint=endpoint, cache=cache, mount=mount, port=port,
                         extra=extra),
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "EPOCHFS_PROGRESS_SECONDS": "1"},
        )
    car = Sidecar(proc, mount, cache, port, log)
    failed = True
    try:
        if expect_ready:
            wait_until(lambda: car.get("/readyz")[0] == 200 or proc.poll() is not None,
                       timeout=ready_timeout, what="/readyz")
            assert proc.poll() is None, f"sidecar exited {proc.returncode}:\n{car.log_text()[-5000:]}"
        yield car
        failed = False
    finally:
        started = time.monotonic()
        code = car.stop()
        took = time.monotonic() - started
        print(f"sidecar stopped by SIGTERM in {took:.2f}s (exit {code})")
        left = leftover_mounts(mount, cache / "objects-ro")
        cleanup_mounts(mount, cache / "objects-ro")
        if failed:
            sys.stderr.write(f"--- sidecar log ({log}) ---\n{car.log_text()[-30000:]}\n")
        else:
            assert code == expect_exit, f"sidecar exit {code}:\n{car.log_text()[-5000:]}"
            assert took < 10, f"SIGTERM took {took:.1f}s"
            assert not left, f"left mounted: {left}"


@contextlib.contextmanager
def sidecar_on_small_volume(tmp_path: Path, volume: str, *, objects: int, size: int,
                            extra: tuple[str, ...]) -> Iterator[tuple[Sidecar, Path]]:
    """A sidecar over a ``file://`` remote of ``objects`` files of ``size`` bytes whose cache alone
    lies on a tmpfs of ``volume`` (``"24m"``), for another tenant to fill: its log stays on
    ``tmp_path``, where it can be written. Yields (the sidecar, the volume)."""
    from inprocess import small_volume

    data = tmp_path / "data"
    data.mkdir()
    for i in range(objects):
        (data / f"{i:03d}.bin").write_bytes(bytes([i % 251]) * size)
    with small_volume(tmp_path / "vol", volume) as vol:
        (vol / "cache").mkdir()
        (tmp_path / "cache").symlink_to(vol / "cache")  # where running_sidecar puts the cache
        with running_sidecar(tmp_path, remote=f"file://{data}", endpoint="", extra=extra) as car:
            yield car, vol
