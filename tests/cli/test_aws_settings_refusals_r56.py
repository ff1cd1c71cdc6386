"""Start mistakes of the AWS settings that no request answers, refused like any bad setting: exit
2 and one line naming what to check, never a traceback and never "cannot be reached now".

- botocore reads the AWS configuration as it makes its client, before any request: a profile
  that does not exist (``AWS_PROFILE``) or a config file it cannot parse must name
  ``AWS_PROFILE`` and the config file; under ``epochfs sidecar`` the sampler's refusal stops the
  sidecar (no restart loop).
- an ``https://`` ``--endpoint-url`` for a plain-HTTP store (moto's and MinIO's default): the TLS
  handshake is answered in plain HTTP, which no retry changes; the line says to use ``http://``.

Run as a user would: the console script in a process of its own, against a real moto server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from common import S3Server, free_port

from epochfs.fuse.mounting import find_mount

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
PROMPT = 30.0
"""Seconds within which a refusal ends the command (about 1 s measured)."""


def _bucket(s3: S3Server) -> str:
    """A bucket with one object under ``train/``: the listing would succeed with good settings."""
    client = s3.client()
    client.create_bucket(Bucket="bkt")
    client.put_object(Bucket="bkt", Key="train/0.bin", Body=b"x" * 64)
    return "s3://bkt/train"


def _sample(argv: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    r = subprocess.run([EPOCHFS, "sample", *argv], capture_output=True, text=True, timeout=120, env=env)
    return r, time.monotonic() - started


def _last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


def _refused(argv: list[str], env: dict[str, str]) -> str:
    """Run ``epochfs sample`` and return its last line, checked to be a prompt refusal (exit 2,
    no traceback)."""
    r, took = _sample(argv, env)
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert took < PROMPT
    return _last_line(r.stderr)


def test_a_missing_profile_is_one_line_naming_aws_profile(s3: S3Server, tmp_path: Path) -> None:
    remote = _bucket(s3)
    env = {**os.environ, "AWS_PROFILE": "nosuch", "HOME": str(tmp_path)}
    last = _refused(["--remote", remote, "--endpoint-url", s3.endpoint, "--cache", str(tmp_path / "c")], env)
    assert last.startswith("epochfs sample: --remote: cannot use the AWS configuration: "), last
    assert "nosuch" in last and "check AWS_PROFILE" in last and "~/.aws/config" in last, last


def test_a_config_file_botocore_cannot_parse_is_one_line(s3: S3Server, tmp_path: Path) -> None:
    remote = _bucket(s3)
    (tmp_path / ".aws").mkdir()
    config = tmp_path / ".aws" / "config"
    config.write_text("[default\naws_access_key_id = x\n")
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                                           "AWS_PROFILE", "AWS_CONFIG_FILE")}
    env["HOME"] = str(tmp_path)
    last = _refused(["--remote", remote, "--endpoint-url", s3.endpoint, "--cache", str(tmp_path / "c")], env)
    assert f"Unable to parse config file: {config}" in last and "check AWS_PROFILE" in last, last


@pytest.mark.fuse
@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="needs root and FUSE")
def test_the_sidecar_stops_on_a_missing_profile(s3: S3Server, tmp_path: Path) -> None:
    """Exit 2 with the sampler's line last (and in the termination message), not a restart loop."""
    remote = _bucket(s3)
    term = tmp_path / "termination-log"
    term.write_text("")
    mount = tmp_path / "view"
    argv = [EPOCHFS, "sidecar", "--remote", remote, "--endpoint-url", s3.endpoint,
            "--cache", str(tmp_path / "cache"), "--mount", str(mount), "--health-port", str(free_port()),
            "--termination-log", str(term)]
    started = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "AWS_PROFILE": "nosuch", "HOME": str(tmp_path)})
    assert r.returncode == 2, r.stderr[-3000:]
    assert time.monotonic() - started < 60
    last = _last_line(r.stderr)
    assert last.startswith("epochfs sidecar: the sampler refused its settings"), last
    assert "check AWS_PROFILE" in last and "nosuch" in last, last
    assert "check AWS_PROFILE" in term.read_text()
    assert "restarting" not in r.stderr and "Traceback" not in r.stderr
    assert find_mount(mount) is None


@pytest.mark.parametrize("signer", ["presigned", "botocore"])
def test_https_to_a_plain_http_store_says_use_http(s3: S3Server, tmp_path: Path, signer: str) -> None:
    """Both ways the first listing is sent: presigned without botocore (keys in the environment,
    no config file) and through botocore's client (an AWS config file present)."""
    remote = _bucket(s3)
    config = tmp_path / "aws-config"
    if signer == "botocore":
        config.write_text("[default]\n")
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_PROFILE", "AWS_ENDPOINT_URL")}
    env.update(AWS_CONFIG_FILE=str(config), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-credentials"))
    host = s3.endpoint.removeprefix("http://")
    r, took = _sample(["--remote", remote, "--endpoint-url", f"https://{host}",
                       "--cache", str(tmp_path / "c")], env)
    assert r.returncode == 2, r.stderr[-3000:]
    assert took < PROMPT
    last = _last_line(r.stderr)
    assert last.startswith("epochfs sample: --endpoint-url: "), last
    fix = f"; --endpoint-url is https:// but the server answered plain HTTP: use http://{host}"
    assert last.endswith(fix), last
