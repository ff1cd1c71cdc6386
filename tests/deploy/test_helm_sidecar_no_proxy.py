"""The chart's own scripts that talk to the sidecar go direct, never through HTTP_PROXY.

Why: behind a corporate proxy ``HTTP_PROXY``/``http_proxy`` is set pod-wide (the trainer's env for
pip and model hubs, ``sidecar.env`` for the remote store), and Python's ``urlopen`` (as curl) sends
even a request to 127.0.0.1 through it unless ``NO_PROXY`` names the host. No proxy reaches the
pod's loopback: the default trainer command's cut request on the folder view never reached the
sidecar (epoch 0 never came), and the legacy sidecar wrapper's /readyz poll never saw it ready (the
trainer never started). Both rendered by the real helm binary and run for real: the trainer command
against a real ``epochfs sidecar --view folder``, the legacy wrapper with the stand-in sidecar of
test_helm_legacy_ready.py; the proxy is a real forward proxy that refuses every request (it wants
credentials nobody sends) and counts it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from common import wait_until
from folderview_helpers import folder_sidecar, owned_dir, write_remote
from helm_helpers import env_of
from proxy_helpers import ForwardProxy, proxied, refusing_proxy
from test_helm_default_trainer_folder import trainer_of
from test_helm_legacy_ready import Legacy, _kill, legacy  # noqa: F401  (legacy: the fixture)

OBJECTS = {f"train/{i:02d}.npy": bytes([i]) * 64 for i in range(6)}


@pytest.fixture
def proxy() -> Iterator[ForwardProxy]:
    with refusing_proxy() as forward:
        yield forward


@pytest.mark.parametrize("where", ["chart", "example"])
def test_default_trainer_command_asks_the_cut_direct(helm_bin: Path, tmp_path: Path,
                                                     proxy: ForwardProxy, where: str) -> None:
    trainer = trainer_of(helm_bin, tmp_path, where)
    command = str(trainer["command"][2])
    with owned_dir() as base:
        remote = base / "remote"
        write_remote(remote, OBJECTS)
        with folder_sidecar(base, remote) as car:
            report = urlsplit(str(env_of(trainer)["EPOCHFS_REPORT_URL"]))
            report = report._replace(netloc=f"127.0.0.1:{car.port}")
            env = proxied({**os.environ, "HOME": str(base), "EPOCHFS_MOUNT": str(car.mount),
                           "EPOCHFS_REPORT_URL": urlunsplit(report)}, proxy)
            # The 10-minute wait cut to 30 s: without a cut the command ends with its own line.
            proc = subprocess.run([sys.executable, "-c", command.replace("+ 600", "+ 30")],
                                  capture_output=True, text=True, timeout=120, env=env)
            assert proc.returncode == 0, proc.stderr
            assert "'epoch-0'" in proc.stdout, proc.stdout
    assert proxy.refused == 0 and proxy.relayed == [], (proxy.refused, proxy.relayed)


def test_legacy_wrapper_sees_the_sidecar_ready_with_a_proxy_in_sidecar_env(
        legacy: Legacy, proxy: ForwardProxy) -> None:  # noqa: F811  (the imported fixture)
    legacy.env = proxied(legacy.env, proxy)
    legacy.ready.touch()  # the stand-in's /readyz answers 200 from the start
    sidecar = legacy.sidecar()
    try:
        wait_until(lambda: (legacy.control / "ready").exists() or proxy.refused >= 2, timeout=30,
                   what="the wrapper's ready file, or two polls refused by the proxy")
        assert (legacy.control / "ready").exists(), (legacy.notes(), proxy.refused)
        (legacy.control / "trainer-exited").touch()
        assert sidecar.wait(timeout=30) == 0
    finally:
        _kill(sidecar)
    assert proxy.refused == 0 and proxy.relayed == [], (proxy.refused, proxy.relayed)
