"""Review 53, settings parsing: what the settings took without a word and should not have.

- a relative ``file://`` remote (``file://remote/sub``) named a different folder from each working
  folder while the cache recorded the same text, so two datasets mixed in one cache: refused,
  exit 2, naming ``file:///abs/path`` (``file://localhost/path`` still means ``/path``);
- a mistyped ``EPOCHFS_*`` variable (``EPOCHFS_CAPCITY``) was ignored: one warning line naming
  the closest known name, and one list of every name anything reads, held to the tree here;
- a refusal comparing two settings named flags only where a value came from the environment;
- credentials in ``--endpoint-url`` were taken and ignored (the store signs with ``AWS_*``);
- ``~`` in a path setting made a folder named ``~``;
- an empty ``EPOCHFS_MAX_RATE`` was refused, ``--help`` showed ``True`` and ``10737418240``, and
  ``--scrub-rate 0.5`` switched the scrub off.

The real ``epochfs`` console script in a process of its own where a process is the point (what
the user sees, the exit status), the parsing functions directly elsewhere.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from common import ROOT

from epochfs.sidecar import config
from epochfs.sidecar.config import ConfigError, SamplerSettings
from epochfs.sidecar.remote.registry import check_index_url, check_url
from epochfs.sidecar.remote.urls import local_root

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
ENDS = 60.0
"""Seconds within which a refused start ends (well under a second measured); a guard against a
hang, not a timing: a start that is not refused runs on and fails the test by it."""


def epochfs(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real CLI, its environment without any ``EPOCHFS_*`` of the test's own but ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    return subprocess.run([EPOCHFS, *args], cwd=cwd, env={**base, **(env or {})}, capture_output=True,
                          text=True, timeout=ENDS)


def dataset(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True)
    for name in names:
        (folder / name).write_bytes(name.encode() * 10)
    return folder


# 1. relative file:// URLs


def test_a_relative_file_url_is_refused_from_any_working_folder(tmp_path: Path) -> None:
    """From two working folders, each with its own ``remote/sub``: both starts end with exit 2
    naming the absolute form, and no cache is made (before, each sampled its own folder into the
    one cache, whose identity check compared the same text)."""
    cache = tmp_path / "cache"
    for where, name in (("a", "A1.bin"), ("b", "B1.bin")):
        dataset(tmp_path / where / "remote" / "sub", name)
        done = epochfs("sample", "--cache", str(cache), "--remote", "file://remote/sub", "--capacity", "1Mi",
                       "--list-process", "0", cwd=tmp_path / where)
        assert done.returncode == 2, done.stderr
        assert "file:///abs/path" in done.stderr and "relative" in done.stderr, done.stderr
    assert not cache.exists()


@pytest.mark.parametrize("url", ["file://remote/sub", "FILE://data/x", "file://host.example/data"])
def test_relative_file_urls_are_refused_by_the_parser(url: str) -> None:
    with pytest.raises(ConfigError, match=r"--remote: .*file:///abs/path"):
        config.parse(SamplerSettings, ["--cache", "/c", "--remote", url], environ={})
    with pytest.raises(ValueError, match="file:///abs/path"):
        check_index_url(url.replace("/sub", "/i.jsonl"))
    with pytest.raises(ValueError, match="file:///abs/path"):
        local_root(url)


def test_absolute_and_localhost_file_urls_are_kept() -> None:
    for url in ("file:///data/train", "file://localhost/data/train", "file://LOCALHOST/data/train"):
        check_url(url)
        assert local_root(url) == "/data/train"
        assert config.parse(SamplerSettings, ["--cache", "/c", "--remote", url], environ={}).remote == url


# 2. unknown EPOCHFS_* variables


def test_a_mistyped_variable_is_warned_of_once_with_the_closest_name(tmp_path: Path) -> None:
    """The real ``epochfs sample`` (ended by a refused shard, after the settings were read): one
    line per unknown name, with the closest known one; a name a tool reads is not warned of."""
    remote = dataset(tmp_path / "ds", "x.bin")
    done = epochfs("sample", "--cache", str(tmp_path / "c"), "--remote", f"file://{remote}",
                   "--shard-index", "5", cwd=tmp_path,
                   env={"EPOCHFS_CAPCITY": "1Mi", "EPOCHFS_ZZQQ": "1", "EPOCHFS_SOAK_SECONDS": "9"})
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if "EPOCHFS_" in line and "WARNING" in line]
    assert len([line for line in lines if "EPOCHFS_CAPCITY" in line]) == 1, done.stderr
    assert any("EPOCHFS_CAPCITY" in line and "did you mean EPOCHFS_CAPACITY?" in line for line in lines)
    assert len([line for line in lines if "EPOCHFS_ZZQQ" in line]) == 1, done.stderr
    assert not any("SOAK" in line for line in lines), lines
    assert len(lines) == 2, lines


def test_service_link_variables_are_not_taken_for_mistyped_settings(tmp_path: Path) -> None:
    """A Service named ``epochfs-metrics`` (or ``epochfs``) in the pod's namespace gives every
    container Kubernetes' service-link variables; nobody typed them, so no warning names them,
    while a mistyped setting beside them is still warned of."""
    remote = dataset(tmp_path / "ds", "x.bin")
    links = {"EPOCHFS_METRICS_SERVICE_HOST": "10.96.0.12", "EPOCHFS_METRICS_SERVICE_PORT": "8080",
             "EPOCHFS_METRICS_SERVICE_PORT_HTTP": "8080", "EPOCHFS_METRICS_PORT_8080_TCP": "tcp://10.96.0.12:8080",
             "EPOCHFS_METRICS_PORT_8080_TCP_PROTO": "tcp", "EPOCHFS_METRICS_PORT_8080_TCP_PORT": "8080",
             "EPOCHFS_METRICS_PORT_8080_TCP_ADDR": "10.96.0.12", "EPOCHFS_SERVICE_HOST": "10.96.0.13",
             "EPOCHFS_PORT_9090_UDP": "udp://10.96.0.13:9090"}
    done = epochfs("sample", "--cache", str(tmp_path / "c"), "--remote", f"file://{remote}",
                   "--shard-index", "5", cwd=tmp_path, env={**links, "EPOCHFS_CAPCITY": "1Mi"})
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if "EPOCHFS_" in line and "WARNING" in line]
    assert len(lines) == 1 and "EPOCHFS_CAPCITY" in lines[0], done.stderr


def test_a_mistyped_port_setting_is_still_warned_of(tmp_path: Path) -> None:
    """Only a ``_PORT`` variable whose value is a service link's (``tcp://...``) is passed over."""
    remote = dataset(tmp_path / "ds", "x.bin")
    done = epochfs("sample", "--cache", str(tmp_path / "c"), "--remote", f"file://{remote}",
                   "--shard-index", "5", cwd=tmp_path, env={"EPOCHFS_HELTH_PORT": "9090"})
    assert done.returncode == 2, done.stderr
    assert "EPOCHFS_HELTH_PORT is set but no epochfs setting reads it" in done.stderr, done.stderr


def test_the_children_of_the_supervisor_get_unknown_names_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sidecar warns at its start; its sampler and view, started and restarted with these
    variables, would warn again at each start."""
    monkeypatch.setenv("EPOCHFS_CAPCITY", "1Mi")
    settings = config.parse(SamplerSettings, ["--cache", "/c", "--remote", "file:///d"], environ={})
    env = config.to_env(settings, SamplerSettings)
    assert "EPOCHFS_CAPCITY" in env and env["EPOCHFS_CAPCITY"] is None
    assert env["EPOCHFS_REMOTE"] == "file:///d"


READ_IN_TESTS = re.compile(
    r"""(?:environ(?:\.get|\.setdefault|\.pop)?\s*[\[(]|getenv\()\s*["'](EPOCHFS_[A-Z0-9_]+)""")
"""A test's own read (or setting, for the processes it starts) of a variable; names in the tests'
other strings may be typos on purpose."""
NAME = re.compile(r"EPOCHFS_[A-Z0-9_]*[A-Z0-9]")
SOURCES = ("sidecar", "fuse", "torchclient", "benchmarks")
OTHER_FILES = ("scripts", "helm", "deploy", "examples", "Makefile", "Dockerfile")


def names_read_in_tree() -> dict[str, str]:
    """Every ``EPOCHFS_*`` name the tree reads or sets -> a file that does. Python sources: every
    string literal that is a name whole (the argument of ``os.environ.get``, a constant's value;
    docstrings are longer); scripts, the chart, the manifests and the image: every name in them
    (they set a sidecar's variables or read the tests'); the tests: their environment reads."""
    found: dict[str, str] = {}
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                value = node.value if isinstance(node, ast.Constant) else None
                if isinstance(value, str) and NAME.fullmatch(value):
                    found.setdefault(value, str(path.relative_to(ROOT)))
    for top in OTHER_FILES:
        base = ROOT / top
        for path in sorted([base] if base.is_file() else (p for p in base.rglob("*") if p.is_file())):
            try:
                text = path.read_text()
            except (UnicodeDecodeError, OSError):
                continue
            for name in NAME.findall(text):
                found.setdefault(name, str(path.relative_to(ROOT)))
    for path in sorted((ROOT / "tests").rglob("*.py")):
        for name in READ_IN_TESTS.findall(path.read_text()):
            found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def test_every_variable_read_in_the_tree_is_known() -> None:
    """The one list (``config.known_env_names``) holds every name something reads: a name added
    to the code and not to the list would be warned of as a typo at every start."""
    found = names_read_in_tree()
    assert {"EPOCHFS_REPORT_URL", "EPOCHFS_SOAK_SECONDS", "EPOCHFS_CACHE", "EPOCHFS_TESTING"} <= found.keys()
    unknown = {name: where for name, where in found.items() if name not in config.known_env_names()}
    assert not unknown, f"read in the tree but not in config.known_env_names(): {unknown}"


# 3. cross-field refusals name the variable


@pytest.mark.parametrize(("environ", "argv", "said"), [
    ({"EPOCHFS_SHARD_INDEX": "3"}, ["--shard-count", "2"],
     "--shard-index (from EPOCHFS_SHARD_INDEX): 3 must be below --shard-count 2"),
    ({"EPOCHFS_SHARD_COUNT": "2"}, ["--shard-index", "3"],
     "--shard-index: 3 must be below --shard-count (from EPOCHFS_SHARD_COUNT) 2"),
    ({"EPOCHFS_MAX_OBJECT_SIZE": "2Mi"}, ["--capacity", "1Mi"],
     "--capacity: 1.0 MiB is smaller than --max-object-size (from EPOCHFS_MAX_OBJECT_SIZE) 2.0 MiB"),
    ({"EPOCHFS_HEADROOM": "0"}, [], "--headroom (from EPOCHFS_HEADROOM): 0 leaves no room"),
    ({"EPOCHFS_MIN_SAMPLES": "50", "EPOCHFS_SCHEDULE": "initial=10"}, [],
     "--min-samples (from EPOCHFS_MIN_SAMPLES): 50 is more than --schedule (from EPOCHFS_SCHEDULE)'s"),
])
def test_refusals_of_two_settings_name_the_variable(environ: dict[str, str], argv: list[str],
                                                     said: str) -> None:
    with pytest.raises(ConfigError) as e:
        config.parse(SamplerSettings, ["--cache", "/c", "--remote", "file:///d", *argv], environ=environ)
    assert said in str(e.value)


def test_the_shard_refusal_names_the_variable_in_the_real_cli(tmp_path: Path) -> None:
    remote = dataset(tmp_path / "ds", "x.bin")
    done = epochfs("sample", "--cache", str(tmp_path / "c"), "--remote", f"file://{remote}", "--shard-count",
                   "2", cwd=tmp_path, env={"EPOCHFS_SHARD_INDEX": "3"})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "epochfs sample: --shard-index (from EPOCHFS_SHARD_INDEX): 3 must be below --shard-count 2")


# 4. credentials in --endpoint-url


SECRET = "SuperSecret99"


@pytest.mark.parametrize("command", ["sample", "index"])
def test_credentials_in_the_endpoint_are_refused(tmp_path: Path, command: str) -> None:
    """Refused with exit 2 before anything is opened, the password not echoed (before: taken, and
    the requests signed with the AWS_* keys)."""
    endpoint = f"http://AKIAUSER:{SECRET}@127.0.0.1:9"
    args = (["sample", "--cache", str(tmp_path / "c"), "--remote", "s3://bkt/p", "--endpoint-url", endpoint]
            if command == "sample" else
            ["index", "s3://bkt/p", "--out", str(tmp_path / "i.jsonl"), "--endpoint-url", endpoint])
    done = epochfs(*args, cwd=tmp_path, env={"AWS_ACCESS_KEY_ID": "testing",
                                             "AWS_SECRET_ACCESS_KEY": "testing",
                                             "AWS_DEFAULT_REGION": "us-east-1"})
    assert done.returncode == 2, done.stderr
    assert "--endpoint-url" in done.stderr and "credentials" in done.stderr, done.stderr
    assert SECRET not in done.stderr and SECRET not in done.stdout


def test_credentials_stay_where_a_backend_reads_them() -> None:
    """An http(s) remote or index URL may carry the server's basic-auth credentials."""
    check_url("https://user:pw@data.example/base")
    check_index_url("https://user:pw@data.example/base/index.txt")
    settings = config.parse(SamplerSettings, ["--cache", "/c", "--remote", "https://u:pw@h.example/b",
                                              "--endpoint-url", "https://minio.example:9000"], environ={})
    assert settings.endpoint_url == "https://minio.example:9000"


# 5. ~ in paths


def test_a_tilde_in_a_path_setting_is_the_home_folder(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    settings = config.parse(config.PublishSettings, ["--mount", "~/view", "--link-root", "~/objects"],
                            environ={"EPOCHFS_CACHE": "~/cache"})
    assert settings.cache == tmp_path / "cache"
    assert settings.mount == tmp_path / "view"
    assert settings.link_root == tmp_path / "objects"  # absolute, as --link-root must be


# 6. empty sizes, help defaults, sub-byte rates


def test_an_empty_size_variable_means_its_default() -> None:
    settings = config.parse(SamplerSettings, ["--cache", "/c", "--remote", "file:///d"],
                            environ={"EPOCHFS_MAX_RATE": "", "EPOCHFS_MAX_OBJECT_SIZE": " "})
    assert settings.max_rate is None and settings.max_object_size is None
    with pytest.raises(ConfigError, match="--capacity"):  # a capacity has a default of its own
        config.parse(SamplerSettings, ["--cache", "/c", "--remote", "file:///d", "--capacity", "x"],
                     environ={})


def test_help_shows_defaults_as_they_are_typed(tmp_path: Path) -> None:
    done = epochfs("sidecar", "--help", cwd=tmp_path)
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    for shown in ("EPOCHFS_CAPACITY; default 10Gi)", "EPOCHFS_SCRUB_RATE; default 8Mi)",
                  "EPOCHFS_LIST_PROCESS; default 1)", "EPOCHFS_KUBE_REPORTING; default 1)",
                  "EPOCHFS_HEADROOM; default 0.25)"):
        assert shown in text, shown
    assert "default True" not in text and "default 10737418240" not in text and "8388608" not in text


@pytest.mark.parametrize("rate", ["0.5", "0.99", "0.0001Ki"])
def test_a_rate_below_one_byte_per_second_is_refused(rate: str) -> None:
    with pytest.raises(ConfigError, match=r"--scrub-rate: .*below 1 byte per second"):
        config.parse(SamplerSettings, ["--cache", "/c", "--remote", "file:///d", "--scrub-rate", rate],
                     environ={})


@pytest.mark.parametrize(("rate", "value"), [("0", 0), ("1", 1), ("1.5", 1), ("8Mi", 8 * 1024**2)])
def test_rates_of_zero_or_at_least_one_byte_are_taken(rate: str, value: int) -> None:
    settings = config.parse(SamplerSettings, ["--cache", "/c", "--remote", "file:///d", "--scrub-rate", rate],
                            environ={})
    assert settings.scrub_rate == value
