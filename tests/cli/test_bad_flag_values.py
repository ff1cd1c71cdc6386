"""Bad values of ``--endpoint-url``, of the path flags and of the listening ports end the real
``epochfs`` command at once with exit status 2 and one line naming the flag: never a traceback, a
crash loop of the sampler, a cache made in the working folder, or an ``Address already in use``.

Run as a user would: the console script in a process of its own group (killed with its children
should a command not end), in a working folder of the test's own that must stay empty."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from common import free_port

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
PROMPT = 60.0
"""Seconds within which a refused value ends the command (about 1 s measured; a loaded machine)."""


def _run(args: Sequence[str], *, cwd: Path,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``epochfs ARGS`` with no ``EPOCHFS_*`` of the caller's; its whole group killed on timeout."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    clean.update(env or {})
    proc = subprocess.Popen([EPOCHFS, *args], cwd=cwd, env=clean, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=PROMPT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"epochfs {args[0]} did not end within {PROMPT:.0f}s: {err[-2000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _refused(r: subprocess.CompletedProcess[str], command: str, says: str) -> str:
    """The last stderr line of a refusal: exit 2, no traceback, ``epochfs COMMAND: ...`` naming ``says``."""
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith(f"epochfs {command}: ") and says in last, r.stderr[-3000:]
    return last


@pytest.fixture
def place(tmp_path: Path) -> Iterator[Path]:
    """A working folder (must stay empty) beside a remote folder with one file."""
    (tmp_path / "work").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.bin").write_bytes(b"x" * 100)
    yield tmp_path
    assert list((tmp_path / "work").iterdir()) == [], "a refused command wrote into the working folder"


def _sample_args(place: Path) -> list[str]:
    return ["--cache", str(place / "cache"), "--remote", f"file://{place / 'data'}"]


def _sidecar_args(place: Path) -> list[str]:
    return [*_sample_args(place), "--mount", str(place / "view"), "--view", "folder",
            "--kube-reporting", "0", "--termination-log", str(place / "termination-log")]


# ---------------------------------------------------------------- --endpoint-url

BAD_ENDPOINTS = [("not a url", "http(s) URL"), ("ftp://x", "http(s) URL"), ("http://", "no host"),
                 ("https://minio:99999", "port")]


@pytest.mark.parametrize(("value", "says"), BAD_ENDPOINTS)
def test_sample_refuses_a_bad_endpoint_url(place: Path, value: str, says: str) -> None:
    r = _run(["sample", *_sample_args(place), "--endpoint-url", value], cwd=place / "work")
    last = _refused(r, "sample", "--endpoint-url: ")
    assert says in last
    assert not (place / "cache").exists()  # refused before the cache was made


def test_a_bad_endpoint_url_variable_is_refused_naming_it(place: Path) -> None:
    r = _run(["sample", *_sample_args(place)], cwd=place / "work", env={"EPOCHFS_ENDPOINT_URL": "ftp://x"})
    assert "http(s) URL" in _refused(r, "sample", "--endpoint-url (from EPOCHFS_ENDPOINT_URL): ")


def test_the_sidecar_refuses_a_bad_endpoint_url_instead_of_restarting_its_sampler(place: Path) -> None:
    r = _run(["sidecar", *_sidecar_args(place), "--health-port", "0", "--endpoint-url", "not a url"],
             cwd=place / "work")
    _refused(r, "sidecar", "--endpoint-url: ")


@pytest.mark.parametrize(("args", "env", "says"), [
    (["--endpoint-url", "ftp://x"], {}, "--endpoint-url: "),
    ([], {"EPOCHFS_ENDPOINT_URL": "not a url"}, "--endpoint-url (from EPOCHFS_ENDPOINT_URL): "),
])
def test_index_refuses_a_bad_endpoint_url(place: Path, args: list[str], env: dict[str, str],
                                          says: str) -> None:
    out = place / "index.txt"
    r = _run(["index", "s3://bucket/data", "--out", str(out), *args], cwd=place / "work", env=env)
    _refused(r, "index", says)
    assert not out.exists()


def test_a_good_endpoint_url_still_passes_the_check() -> None:
    from epochfs.sidecar.config import SamplerSettings, parse

    for url in ("http://minio:9000", "https://s3.example.com", "http://[::1]:9000/"):
        settings = parse(SamplerSettings, ["--cache", "/c", "--remote", "s3://b/x", "--endpoint-url", url])
        assert settings.endpoint_url == url
    # Empty is none (the store's own endpoint), as an empty EPOCHFS_INDEX is no index.
    for argv, env in ((["--endpoint-url", ""], {}), ([], {"EPOCHFS_ENDPOINT_URL": " "})):
        settings = parse(SamplerSettings, ["--cache", "/c", "--remote", "s3://b/x", *argv], env)
        assert settings.endpoint_url is None


# ---------------------------------------------------------------- empty paths

@pytest.mark.parametrize(("command", "args", "env", "says"), [
    ("sample", ["--cache", "", "--remote", "s3://b/x"], {}, "--cache: "),
    ("sample", ["--remote", "s3://b/x"], {"EPOCHFS_CACHE": ""}, "--cache (from EPOCHFS_CACHE): "),
    ("status", ["--cache", ""], {}, "--cache: "),
    ("status", ["--mount", ""], {}, "--mount: "),
    ("cut", ["--cache", ""], {}, "--cache: "),
    ("unmount", ["--mount", ""], {}, "--mount: "),
])
def test_an_empty_path_is_refused_not_taken_as_the_working_folder(
        place: Path, command: str, args: list[str], env: dict[str, str], says: str) -> None:
    r = _run([command, *args], cwd=place / "work", env=env)
    assert "empty" in _refused(r, command, says)


@pytest.mark.parametrize("flag", ["--mount", "--termination-log"])  # an empty --link-root is its default
def test_the_sidecar_refuses_an_empty_path(place: Path, flag: str) -> None:
    args = _sidecar_args(place)
    if flag in args:
        args[args.index(flag) + 1] = ""
    else:
        args += [flag, ""]
    r = _run(["sidecar", *args, "--health-port", "0"], cwd=place / "work")
    assert "empty" in _refused(r, "sidecar", f"{flag}: ")
    assert not (place / "cache").exists()


# ---------------------------------------------------------------- ports in use

@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port another process (here: this test) listens on, on every address."""
    port = free_port()
    with socket.create_server(("0.0.0.0", port)) as sock:
        sock.listen()
        yield port


def test_a_health_port_in_use_is_refused_with_the_flag_and_port(place: Path, taken_port: int) -> None:
    (place / "termination-log").touch()  # as in a pod: Kubernetes makes the file
    r = _run(["sidecar", *_sidecar_args(place), "--health-port", str(taken_port)], cwd=place / "work")
    last = _refused(r, "sidecar", f"--health-port {taken_port}: address already in use")
    assert "--health-port 0" in last or "another port" in last
    # kubectl describe pod says it too.
    said = (place / "termination-log").read_text()
    assert f"--health-port {taken_port}: address already in use" in said, said


def test_a_metrics_port_in_use_is_refused_with_the_flag_and_port(place: Path, taken_port: int) -> None:
    r = _run(["sidecar", *_sidecar_args(place), "--health-port", "0", "--metrics-port", str(taken_port)],
             cwd=place / "work")
    _refused(r, "sidecar", f"--metrics-port {taken_port}: address already in use")


def test_path_settings_are_stripped_as_every_other_setting_is() -> None:
    """``EPOCHFS_CACHE`` filled from a file or a secret ends in a newline: ``/c\\n`` made a new,
    empty cache beside the real one, silently."""
    from epochfs.sidecar.config import SamplerSettings, parse

    settings = parse(SamplerSettings, ["--remote", "s3://b/x"], {"EPOCHFS_CACHE": "/data/cache\n"})
    assert settings.cache == Path("/data/cache")
    settings = parse(SamplerSettings, ["--cache", " /data/cache \n", "--remote", "s3://b/x"])
    assert settings.cache == Path("/data/cache")


# ---------------------------------------------------------------- sizes argparse or floats mistook

@pytest.mark.parametrize(("args", "says"), [
    (["--capacity", "-5Gi"], "--capacity: must not be negative"),
    (["--max-rate", "-1Mi"], "--max-rate: must not be negative"),
    (["--capacity", "1" + "0" * 400], "--capacity: "),
    (["--max-object-size", "9" * 40 + "Ti"], "--max-object-size: "),
])
def test_a_negative_or_huge_size_is_refused_naming_the_flag(place: Path, args: list[str], says: str) -> None:
    """``--capacity -5Gi`` was taken by argparse for an option of its own (the whole usage, then
    "expected one argument"); a size of hundreds of digits overflowed into a traceback."""
    r = _run(["sample", *_sample_args(place), *args], cwd=place / "work")
    _refused(r, "sample", says)
    assert not (place / "cache").exists()


@pytest.mark.parametrize(("args", "env", "says"), [
    (["--capacity", "10XB"], {}, "--capacity: "),
    (["--headroom", "0"], {}, "--headroom"),
    (["--shard-index", "2", "--shard-count", "2"], {}, "--shard-index"),
    ([], {"EPOCHFS_CAPACITY": "-1"}, "--capacity (from EPOCHFS_CAPACITY): "),
])
def test_the_sidecars_own_refusals_reach_the_termination_log(place: Path, args: list[str],
                                                             env: dict[str, str], says: str) -> None:
    """A flag the sidecar itself refuses (not a child) was printed but never written to
    --termination-log, which its help says "gets the reason when the sidecar stops on a refused
    setting": in a pod ``kubectl describe`` showed no reason."""
    (place / "termination-log").touch()  # as in a pod: Kubernetes makes the file
    r = _run(["sidecar", *_sidecar_args(place), *args, "--health-port", "0"], cwd=place / "work", env=env)
    last = _refused(r, "sidecar", says)
    assert (place / "termination-log").read_text().strip() == last
