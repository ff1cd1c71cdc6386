"""No secret in a command line, a log line or an error: a password in a remote's URL (an http(s)
server's basic auth) and presigned-URL signatures are redacted everywhere."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
from common import free_port, wait_until
from sidecar_helpers import running_sidecar

from epochfs.sidecar import config
from epochfs.sidecar.redact import RedactingFilter, redact

SECRET = "s3cr3t-P4ss"


@pytest.mark.parametrize(("text", "kept"), [
    (f"http://user:{SECRET}@10.0.0.1:9000/bucket", "http://***:***@10.0.0.1:9000/bucket"),
    (f"Could not connect to the endpoint URL: \"https://AKIA:{SECRET}@minio.local/x\"",
     "Could not connect to the endpoint URL: \"https://***:***@minio.local/x\""),
    (f"https://{SECRET}@gitlab.example/x", "https://***@gitlab.example/x"),
    (f"GET https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA%2F1&X-Amz-Signature={SECRET}&x=1",
     "GET https://b.s3.amazonaws.com/k?X-Amz-Credential=***&X-Amz-Signature=***&x=1"),
    ("s3://bucket/prefix/no-secret@here", "s3://bucket/prefix/no-secret@here"),
])
def test_redact(text: str, kept: str) -> None:
    assert redact(text) == kept


def test_log_records_are_redacted(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("epochfs.test.secrets")
    caplog.handler.addFilter(RedactingFilter())
    with caplog.at_level(logging.INFO):
        log.info("endpoint %s unreachable", f"http://u:{SECRET}@127.0.0.1:9")
        try:
            raise OSError(f"connect to http://u:{SECRET}@127.0.0.1:9 failed")
        except OSError:
            log.exception("listing failed")
    assert SECRET not in caplog.text and "http://***:***@127.0.0.1:9" in caplog.text


def test_children_get_settings_through_the_environment() -> None:
    """A password in an https:// remote's URL (the server's basic auth; an endpoint URL's
    credentials are refused, review 53) goes to the children in their environment."""
    settings = config.parse(config.SamplerSettings, [
        "--cache", "/c", "--remote", f"https://u:{SECRET}@h:1/base"], environ={})
    env = config.to_env(settings, config.SamplerSettings)
    assert env["EPOCHFS_REMOTE"] == f"https://u:{SECRET}@h:1/base" and env["EPOCHFS_MAX_RATE"] is None
    again = config.parse(config.SamplerSettings, [], environ={k: v for k, v in env.items() if v is not None})
    assert again == settings


def test_no_secret_in_the_sidecars_command_lines_or_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sampler cannot reach a server whose URL holds a password (an http:// remote's basic
    auth): it fails and is restarted, and neither its command line (what ps -ef shows) nor any log
    line holds the password."""
    for name, value in (("AWS_ACCESS_KEY_ID", "testing"), ("AWS_SECRET_ACCESS_KEY", "testing"),
                        ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(name, value)
    remote = f"http://user:{SECRET}@127.0.0.1:{free_port()}/base"
    seen: list[str] = []

    def sampler_cmdline() -> bool:
        pid = car.child_pid("sampler")
        if pid is None:
            return False
        try:
            seen.append(Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"))
        except OSError:
            return False
        return True

    with running_sidecar(tmp_path, remote=remote, endpoint="", expect_ready=False,
                         extra=("--retries", "1")) as car:
        wait_until(sampler_cmdline, timeout=30, what="a running sampler child")
        wait_until(lambda: "[sampler]" in car.log_text() and "127.0.0.1" in car.log_text(), timeout=60,
                   what="the sampler's error about the server")
        wait_until(lambda: car.health().get("children", {}).get("sampler", {}).get("restarts", 0) >= 1,
                   timeout=60, what="a restart of the sampler")
        sampler_cmdline()
    assert seen and all(SECRET not in line for line in seen), seen
    assert "sample" in seen[0] and "--remote" not in seen[0]
    assert SECRET not in car.log_text(), "the password leaked into the log"
    assert os.environ.get("EPOCHFS_REMOTE") is None
