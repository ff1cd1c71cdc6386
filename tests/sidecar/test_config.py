"""Every bad flag of ``epochfs sample`` exits 2 with one clear line naming the flag.

Run through the real ``epochfs`` console script in a subprocess, as a user or the supervisor would.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from common import wait_until

from epochfs.sidecar.confparse import OTHER_ENV

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))


def run(
    args: list[str], env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    full_env.update(env or {})
    return subprocess.run([EPOCHFS, *args], capture_output=True, text=True, env=full_env, timeout=timeout)


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    (root / "train").mkdir(parents=True)
    for i in range(3):
        (root / "train" / f"{i}.bin").write_bytes(os.urandom(4096))
    return root


def _samples(cache: Path) -> int:
    """Samples the cache's index holds (0 before it exists)."""
    if not (cache / "index.sqlite").exists():
        return 0
    with contextlib.closing(sqlite3.connect(f"file:{cache / 'index.sqlite'}?mode=ro", uri=True)) as db:
        try:
            return int(db.execute("SELECT count(*) FROM samples").fetchone()[0])
        except sqlite3.OperationalError:  # the schema not there yet
            return 0


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got: {proc.stderr!r}"
    return lines[0]


@pytest.mark.parametrize(
    ("extra", "env", "flag", "words"),
    [
        (["--capacity=-5Gi"], {}, "--capacity", "negative"),
        (["--capacity", "0"], {}, "--capacity", "positive"),
        (["--capacity", "lots"], {}, "--capacity", "not a size"),
        ([], {"EPOCHFS_CAPACITY": "-1"}, "--capacity", "EPOCHFS_CAPACITY"),
        (["--shard-index", "2", "--shard-count", "2"], {}, "--shard-index", "below --shard-count"),
        (["--shard-index=-1"], {}, "--shard-index", "negative"),
        (["--shard-count", "0"], {}, "--shard-count", "at least 1"),
        (["--concurrency", "0"], {}, "--concurrency", "at least 1"),
        (["--capacity", "1Mi", "--max-object-size", "2Mi"], {}, "--capacity",
         "smaller than --max-object-size"),
        (["--schedule", "initial=0"], {}, "--schedule", "initial"),
        (["--schedule", "speed=3"], {}, "--schedule", "unknown"),
        (["--headroom", "1.5"], {}, "--headroom", "[0, 1)"),
        # A percentage (as a share is often said: 25%) gets the form to write.
        (["--headroom", "25%"], {}, "--headroom", "not a percentage: write 0.25"),
        ([], {"EPOCHFS_HEADROOM": "10 %"}, "--headroom", "write 0.1"),
        (["--seed", "abc"], {}, "--seed", "must be a whole number, got 'abc'"),
        # Settings once read where they were used, each with its own policy for a bad value.
        ([], {"EPOCHFS_READ_TIMEOUT": "soon"}, "--read-timeout", "EPOCHFS_READ_TIMEOUT"),
        (["--read-timeout", "0"], {}, "--read-timeout", "positive"),
        ([], {"EPOCHFS_PROGRESS_SECONDS": "-1"}, "--progress-seconds", "positive"),
        # Numbers that are not: NaN compared false in every check (an epoch cut at every tick,
        # the in-use pin off), inf overflowed the socket's timeout as a listing error.
        (["--cut-interval", "nan"], {}, "--cut-interval", "finite"),
        (["--cut-interval=-5"], {}, "--cut-interval", "negative"),
        ([], {"EPOCHFS_IN_USE_SECONDS": "nan"}, "--in-use-seconds", "finite"),
        (["--in-use-seconds=-1"], {}, "--in-use-seconds", "negative"),
        (["--read-timeout", "inf"], {}, "--read-timeout", "finite"),
        (["--read-timeout", "1e300"], {}, "--read-timeout", "at most 3600"),
        (["--relist-interval", "inf"], {}, "--relist-interval", "finite"),
        (["--concurrency", "100000"], {}, "--concurrency", "at most 1024"),
        (["--list-threads", "100000"], {}, "--list-threads", "at most 256"),
        (["--retire-grace", "0.5"], {}, "--retire-grace", "at least 1 (a view refreshes its epochs every"),
        ([], {"EPOCHFS_RETIRE_GRACE": "7200"}, "--retire-grace", "at most 3600"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    tmp_path: Path, dataset: Path, extra: list[str], env: dict[str, str], flag: str, words: str
) -> None:
    proc = run(["sample", "--remote", dataset.as_uri(), "--cache", str(tmp_path / "c"), *extra], env)
    assert proc.returncode == 2, proc.stderr
    line = one_line(proc)
    assert line.startswith(f"epochfs sample: {flag}"), line
    assert words in line
    assert not (tmp_path / "c").exists(), "a refused command must not create the cache"


@pytest.mark.parametrize(
    ("remote", "words"),
    [("ftp://host/data", "unknown URL scheme 'ftp'"), ("data/train", "needs a scheme"), ("", "empty")],
)
def test_bad_remote_url(tmp_path: Path, remote: str, words: str) -> None:
    proc = run(["sample", "--remote", remote, "--cache", str(tmp_path / "c")])
    assert proc.returncode == 2
    line = one_line(proc)
    assert line.startswith("epochfs sample: --remote") and words in line, line


def test_cache_that_is_a_file(tmp_path: Path, dataset: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    proc = run(["sample", "--remote", dataset.as_uri(), "--cache", str(tmp_path / "file")])
    assert proc.returncode == 2
    line = one_line(proc)
    assert line.startswith("epochfs sample: --cache") and "not a directory" in line, line


def test_missing_required_flags(tmp_path: Path) -> None:
    proc = run(["sample", "--cache", str(tmp_path / "c")])
    assert proc.returncode == 2
    assert one_line(proc).startswith("epochfs sample: --remote: required")


def test_gcs_without_gcsfs_is_a_clear_message(tmp_path: Path) -> None:
    try:
        import gcsfs  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("gcsfs is installed here")
    proc = run(["--log-level", "ERROR", "sample", "--remote", "gs://bucket/data",
                "--cache", str(tmp_path / "c")])
    assert proc.returncode == 2
    line = one_line(proc)
    assert line.startswith("epochfs sample: --remote") and "gcsfs" in line, line


def test_folder_that_does_not_exist(tmp_path: Path) -> None:
    proc = run(["--log-level", "ERROR", "sample", "--remote", (tmp_path / "nope").as_uri(),
                "--cache", str(tmp_path / "c")])
    assert proc.returncode == 2
    line = one_line(proc)
    assert line.startswith("epochfs sample: --remote") and "not a folder" in line, line


def test_capacity_smaller_than_every_object(tmp_path: Path, dataset: Path) -> None:
    proc = run(["--log-level", "ERROR", "sample", "--remote", dataset.as_uri(),
                "--cache", str(tmp_path / "c"), "--capacity", "3000"])
    assert proc.returncode == 2
    line = one_line(proc)
    assert line.startswith("epochfs sample: --capacity") and "larger than the object limit" in line, line


def test_max_object_size_smaller_than_every_object(tmp_path: Path, dataset: Path) -> None:
    proc = run(["--log-level", "ERROR", "sample", "--remote", dataset.as_uri(),
                "--cache", str(tmp_path / "c"), "--max-object-size", "1Ki"])
    assert proc.returncode == 2
    assert one_line(proc).startswith("epochfs sample: --max-object-size")


def test_a_cache_keeps_its_seed(tmp_path: Path, dataset: Path) -> None:
    """Ranks in the catalog belong to one seed: another seed on the same cache is refused (once
    the cache holds something of the first seed's: a cache whose listings found nothing belongs
    to no remote and no seed yet, docs/sidecar.md)."""
    cache = tmp_path / "c"
    first = subprocess.Popen([EPOCHFS, "--log-level", "ERROR", "sample", "--remote", dataset.as_uri(),
                              "--cache", str(cache), "--seed", "1"], stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: _samples(cache) >= 3 or first.poll() is not None, timeout=60,
                   what="the first seed's samples")
        assert first.poll() is None, first.communicate()[1]
    finally:
        first.terminate()
        first.communicate(timeout=60)
    proc = run(["--log-level", "ERROR", "sample", "--remote", dataset.as_uri(), "--cache", str(cache),
                "--seed", "2"])
    assert proc.returncode == 2
    line = one_line(proc)
    assert line.startswith("epochfs sample: --seed") and "'1'" in line, line


@pytest.mark.parametrize(
    ("command", "env", "flag"),
    [
        ("mount", {"EPOCHFS_WARM_FILES": "many"}, "--warm-files"),
        ("sidecar", {"EPOCHFS_WARM_FILES": "-3"}, "--warm-files"),
        ("sidecar", {"EPOCHFS_KUBE_REPORTING": "maybe"}, "--kube-reporting"),
        ("sidecar", {"EPOCHFS_KUBE_STATUS_INTERVAL": "soon"}, "--kube-status-interval"),
        ("sidecar", {"EPOCHFS_KUBE_ERROR_THRESHOLD": "0"}, "--kube-error-threshold"),
    ],
)
def test_every_setting_has_one_policy_for_a_bad_value(
    tmp_path: Path, dataset: Path, command: str, env: dict[str, str], flag: str
) -> None:
    """Bad values of settings the FUSE server and the supervisor read exit 2 naming the flag and
    the variable, before anything is mounted or started."""
    args = [command, "--cache", str(tmp_path / "c"), "--mount", str(tmp_path / "m")]
    if command == "sidecar":
        args += ["--remote", dataset.as_uri()]
    proc = run(args, env)
    assert proc.returncode == 2, proc.stderr
    line = one_line(proc)
    assert line.startswith(f"epochfs {command}: {flag}") and next(iter(env)) in line, line
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("command", ["sample", "mount", "sidecar"])
def test_every_epochfs_variable_is_in_help(command: str) -> None:
    """Each EPOCHFS_* variable the code reads is declared as a setting, so --help lists it."""
    import re

    from epochfs.sidecar import config

    root = Path(__file__).resolve().parents[2]
    read = set()
    for path in [*root.glob("sidecar/**/*.py"), *root.glob("fuse/*.py")]:
        read |= set(re.findall(r"EPOCHFS_[A-Z_]+", path.read_text()))
    declared = {config.env_name(f.metadata["flag"]) for cls in (config.SidecarSettings, config.MountSettings)
                for f in config.fields(cls)} | {"EPOCHFS_LOG_LEVEL"}
    # The names other tools read (tests, scripts, the torch client), listed in the product so that
    # they are never warned of as typos: listed there, not read there.
    read -= set(OTHER_ENV) - {"EPOCHFS_LOG_LEVEL", "EPOCHFS_REPORT_URL"}
    assert read <= declared | {"EPOCHFS_REPORT_URL"}, sorted(read - declared)
    proc = run([command, "--help"])
    assert proc.returncode == 0
    cls = {"sample": config.SamplerSettings, "mount": config.MountSettings,
           "sidecar": config.SidecarSettings}[command]
    for f in config.fields(cls):
        assert config.env_name(f.metadata["flag"]) in proc.stdout.replace("\n", " "), f.name


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["status", "--watch", "--interval", "nan"], "--interval"),
        (["status", "--interval", "inf"], "--interval"),
        (["verify", "--progress-seconds", "nan"], "--progress-seconds"),
    ],
)
def test_intervals_that_are_not_numbers_are_usage_errors(tmp_path: Path, args: list[str], flag: str) -> None:
    """``status --watch --interval nan`` printed a screen, then a traceback from ``sleep``; inf
    overflowed it: a usage error (exit 2) before anything is read."""
    proc = run([*args, "--cache", str(tmp_path)])
    assert proc.returncode == 2, proc.stderr
    assert f"argument {flag}: must be a finite number" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_index_bounds_its_listers_as_the_sampler_does(tmp_path: Path, dataset: Path) -> None:
    """100,000 listers took an index 14.9 s where 8 took 1.4 s: refused, as --concurrency's bound is."""
    proc = run(["index", dataset.as_uri(), "--out", str(tmp_path / "i.jsonl"), "--list-threads", "100000"])
    assert proc.returncode == 2 and "--list-threads: must be at most 256" in one_line(proc), proc.stderr
    assert not (tmp_path / "i.jsonl").exists()


def test_index_names_a_parent_that_is_a_file(tmp_path: Path, dataset: Path) -> None:
    (tmp_path / "afile").write_text("x")
    proc = run(["index", dataset.as_uri(), "--out", str(tmp_path / "afile" / "i.jsonl")])
    said = one_line(proc)
    assert proc.returncode == 2 and f"{tmp_path / 'afile'} is a file, not a folder" in said, proc.stderr


@pytest.mark.parametrize("flag", ["--port", "--metrics-port"])
def test_webhook_ports_are_tcp_ports(tmp_path: Path, flag: str) -> None:
    proc = run(["webhook", "--profiles", str(tmp_path), "--tls-cert", str(tmp_path / "c"),
                "--tls-key", str(tmp_path / "k"), flag, "70000"])
    assert proc.returncode == 2, proc.stderr
    assert f"argument {flag}: must be a TCP port (0-65535)" in proc.stderr, proc.stderr
