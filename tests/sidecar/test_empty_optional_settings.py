"""An empty value of a setting whose default is none means that default (README, "an empty
variable whose default is none ... means that default"), for every such setting and from a flag as
from a variable: a manifest or a Kustomize overlay writes ``value: ""`` to mean "unset", and a
sidecar that refused ``EPOCHFS_METRICS_PORT=`` or ``EPOCHFS_LINK_ROOT=`` exited 2 at every start
(a crash loop). A bad port is refused in words, not with ``int()``'s message.

The settings are read by the real parser (``config.parse``) and the real console script;
``epochfs sidecar``, ``mount`` and ``publish`` run for real, with real FUSE and bind mounts."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import pytest
from common import stop_process, wait_until
from fuse_helpers import admit, make_objects, open_store
from sidecar_helpers import file_remote, running_sidecar

from epochfs.fuse.mounting import find_mount, lazy_unmount, wait_for_mount
from epochfs.sidecar import config
from epochfs.sidecar.config import ConfigError

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
DOCUMENTED_EXCEPTIONS = {"include", "exclude"}
"""Optional settings that refuse an empty value on purpose: docs/listing.md refuses an empty
pattern (it would match nothing, or everything, without a word)."""
REQUIRED = {"--cache": "/c", "--remote": "s3://b/x", "--mount": "/m"}

needs_root_fuse = pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"),
                                     reason="needs root and /dev/fuse")


def _optional_fields() -> list[tuple[type[config.CacheSettings], str, str]]:
    """(settings class, field, flag) of every field whose default is none, but the exceptions."""
    return [(cls, f.name, f.metadata["flag"]) for cls in config.SETTINGS_CLASSES for f in fields(cls)
            if f.default is None and not f.metadata["required"] and f.name not in DOCUMENTED_EXCEPTIONS]


def _required_argv(cls: type[config.CacheSettings]) -> list[str]:
    flags = {f.metadata["flag"] for f in fields(cls) if f.metadata["required"]}
    return [part for flag in sorted(flags) for part in (flag, REQUIRED[flag])]


def test_the_optional_settings_include_the_port_and_the_link_roots() -> None:
    """The parametrized test below covers what the derivation finds; it must find these."""
    found = {(cls.__name__, name) for cls, name, _ in _optional_fields()}
    assert {("SidecarSettings", "metrics_port"), ("SidecarSettings", "link_root"),
            ("MountSettings", "link_root"), ("PublishSettings", "link_root"),
            ("SamplerSettings", "max_rate"), ("SamplerSettings", "endpoint_url")} <= found, found


@pytest.mark.parametrize(("cls", "name", "flag"),
                         [pytest.param(*o, id=f"{o[0].__name__}-{o[2]}") for o in _optional_fields()])
@pytest.mark.parametrize("empty", ["", " ", "\n"], ids=["empty", "space", "newline"])
def test_an_empty_optional_setting_means_its_default(
        cls: type[config.CacheSettings], name: str, flag: str, empty: str) -> None:
    from_env = config.parse(cls, _required_argv(cls), {config.env_name(flag): empty})
    assert getattr(from_env, name) is None, f"{config.env_name(flag)}={empty!r}"
    from_flag = config.parse(cls, [*_required_argv(cls), f"{flag}={empty}"], {})
    assert getattr(from_flag, name) is None, f"{flag}={empty!r}"


@pytest.mark.parametrize(("argv", "env", "source"), [
    (["--metrics-port", "abc"], {}, "--metrics-port"),
    (["--health-port", "70000"], {}, "--health-port"),
    ([], {"EPOCHFS_HEALTH_PORT": ""}, "--health-port (from EPOCHFS_HEALTH_PORT)"),  # default 8080
    ([], {"EPOCHFS_METRICS_PORT": "9090x"}, "--metrics-port (from EPOCHFS_METRICS_PORT)"),
])
def test_a_bad_port_is_refused_in_words(argv: list[str], env: dict[str, str], source: str) -> None:
    with pytest.raises(ConfigError) as refused:
        config.parse(config.SidecarSettings, [*_required_argv(config.SidecarSettings), *argv], env)
    said = str(refused.value)
    assert said.startswith(f"{source}: must be a TCP port (0-65535)"), said
    assert "invalid literal" not in said, said


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    return {**env, **extra}


def test_the_console_script_names_a_bad_port_in_words(tmp_path: Path) -> None:
    r = subprocess.run([EPOCHFS, "sidecar", "--remote", (tmp_path / "data").as_uri(), "--cache",
                        str(tmp_path / "c"), "--mount", str(tmp_path / "m")],
                       env=_clean_env({"EPOCHFS_METRICS_PORT": "nine"}), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2, r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last == ("epochfs sidecar: --metrics-port (from EPOCHFS_METRICS_PORT): must be a TCP port "
                    "(0-65535), got 'nine'"), r.stderr[-3000:]


@pytest.mark.fuse
@needs_root_fuse
def test_a_sidecar_with_the_variables_empty_starts_and_serves_metrics_on_the_health_port(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a manifest's ``value: ""`` gives: the sidecar runs, ``/metrics`` on the health port
    (the default of ``--metrics-port``), the link root its own read-only bind mount."""
    monkeypatch.setenv("EPOCHFS_METRICS_PORT", "")
    monkeypatch.setenv("EPOCHFS_LINK_ROOT", "")
    with running_sidecar(tmp_path, remote=file_remote(tmp_path), endpoint="",
                         extra=("--kube-reporting", "0")) as car:
        assert "epochfs_cache_capacity_bytes" in car.metrics()
        health = car.health()
        assert health["code"] == 200, health
        assert find_mount(car.cache / "objects-ro") is not None, "no read-only bind of the objects"


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """A cache with epoch 0 cut."""
    with open_store(tmp_path / "cache") as store:
        admit(store, make_objects(4, 64))
        assert store.cut(0) == 0
    return tmp_path / "cache"


@pytest.fixture
def stopped(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes to stop by their pid at the end, and their mounts to take down."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        if proc.poll() is None:
            stop_process(proc, timeout=30)
    for place in (tmp_path / "view", tmp_path / "cache" / "objects-ro"):
        if find_mount(place) is not None:
            lazy_unmount(place, any_kind=True)


def _start(command: str, cache: Path, view: Path, procs: list[subprocess.Popen[bytes]]) -> None:
    log = open(view.with_name(f"{command}.log"), "wb")  # noqa: SIM115 - the child writes it
    try:
        procs.append(subprocess.Popen([EPOCHFS, command, "--cache", str(cache), "--mount", str(view)],
                                      env=_clean_env({"EPOCHFS_LINK_ROOT": ""}), stdout=log,
                                      stderr=subprocess.STDOUT))
    finally:
        log.close()


@pytest.mark.fuse
@needs_root_fuse
def test_mount_with_an_empty_link_root_serves_the_view(
        tmp_path: Path, cache: Path, stopped: list[subprocess.Popen[bytes]]) -> None:
    view = tmp_path / "view"
    view.mkdir()
    _start("mount", cache, view, stopped)
    proc = stopped[0]
    assert wait_for_mount(view, timeout=30, alive=lambda: proc.poll() is None), \
        (tmp_path / "mount.log").read_text(errors="replace")
    assert len(list((view / "epoch-0" / "train").iterdir())) == 4


def test_publish_with_an_empty_link_root_publishes_the_view(
        tmp_path: Path, cache: Path, stopped: list[subprocess.Popen[bytes]]) -> None:
    view = tmp_path / "view"
    _start("publish", cache, view, stopped)
    proc = stopped[0]
    wait_until(lambda: (view / "epoch-0").is_dir() or proc.poll() is not None, timeout=30,
               what="epoch 0 published")
    assert proc.poll() is None, (tmp_path / "publish.log").read_text(errors="replace")
    entries = list((view / "epoch-0" / "train").iterdir())
    assert len(entries) == 4 and all(e.resolve().is_relative_to(cache / "objects") for e in entries)
