"""A pod's long values cost the webhook nothing: an annotation of 200,000 characters (the API
server lets a pod carry 256 KiB of them) is refused at once with its value cut in the message,
while the other reviews and ``/healthz`` are answered, and a value a parser handles badly (a
capacity or a shard of thousands of digits) is refused before that parser sees it.

The server is the real ``epochfs webhook`` process, since what is at stake is the whole process:
a refusal logged through the redacting filter held the GIL for about a minute, so every thread
(the event loop, the metrics server) stopped. The hostile review and the ordinary ones run at
once, each with the client's 30-second timeout: the process that stalled answered none of them
in time.
"""

from __future__ import annotations

import http.client
import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from common import wait_until
from test_webhook_server import docs, profiles  # noqa: F401  (fixtures)
from webhook_helpers import (
    SERVICE_DNS,
    Client,
    job,
    job_pod,
    make_ca,
    make_leaf,
    pem,
    webhook_cmd,
    write_profiles,
)

from epochfs.sidecar.webhook.fields import MAX_MESSAGE_CHARS

ROOT = Path(__file__).resolve().parents[2]
HUGE = 200_000


class Running:
    """The ``epochfs webhook`` process: its HTTPS client, its metrics port and its log."""

    def __init__(self, client: Client, metrics_port: int, log: Path) -> None:
        self.client, self.metrics_port, self.log = client, metrics_port, log

    def healthz(self) -> bytes:
        conn = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=30)
        try:
            conn.request("GET", "/healthz")
            return conn.getresponse().read()
        finally:
            conn.close()


@pytest.fixture(scope="module")
def running(docs: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:  # noqa: F811
    folder = tmp_path_factory.mktemp("webhook")
    write_profiles(docs, folder / "profiles")
    ca = make_ca()
    cert, key, _ = make_leaf(ca, [SERVICE_DNS])
    (folder / "tls.crt").write_bytes(cert)
    (folder / "tls.key").write_bytes(key)
    log = folder / "webhook.log"
    with log.open("w") as out:  # a file, not a pipe: nothing has to drain it
        proc = subprocess.Popen(
            webhook_cmd(folder / "profiles", folder / "tls.crt", folder / "tls.key", "--host", "127.0.0.1",
                        "--port", "0", "--metrics-port", "0", "--log-level", "INFO"),
            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        m = wait_until(lambda: proc.poll() is None and re.search(
            r"on https port (\d+) \(metrics on (\d+)\)", log.read_text()), what="the webhook serving")
        yield Running(Client(int(m.group(1)), pem(ca[1])), int(m.group(2)), log)
    finally:
        proc.kill()
        proc.wait()


def _asking(annotations: dict[str, str]) -> dict[str, Any]:
    return job_pod(job(annotations=annotations))


def _refusal(client: Client, annotations: dict[str, str]) -> str:
    response = client.review(_asking(annotations))["response"]
    assert response["allowed"] is False, response
    message: str = response["status"]["message"]
    return message


@pytest.mark.parametrize(("key", "value"), [
    ("epochfs.io/remote", "ftp://" + "x" * HUGE),
    ("epochfs.io/profile", "p" * HUGE),
    ("epochfs.io/containers", "c," * (HUGE // 2)),
    ("epochfs.io/shard-index", "9" * HUGE),
])
def test_a_huge_annotation_is_refused_while_other_reviews_are_answered(
    running: Running, key: str, value: str
) -> None:
    hostile: dict[str, Any] = {}

    def send() -> None:
        try:
            hostile["message"] = _refusal(running.client, {key: value})
        except Exception as e:  # a timeout: reported by the assertion below
            hostile["error"] = e

    thread = threading.Thread(target=send)
    thread.start()
    try:
        ordinary = running.client.review(_asking({}))["response"]
        health = running.healthz()
    finally:
        thread.join()
    assert "error" not in hostile, hostile
    assert ordinary["allowed"] is True and ordinary["patchType"] == "JSONPatch"
    assert health == b"ok\n"
    message = hostile["message"]
    assert message.startswith(f"epochfs: {key}: ") and f"… ({len(value)} characters)" in message
    assert len(message) <= MAX_MESSAGE_CHARS
    logged = [line for line in running.log.read_text().splitlines() if f"{key}: " in line]
    assert logged and all(len(line) < 2 * MAX_MESSAGE_CHARS for line in logged)


@pytest.mark.parametrize(("annotations", "said"), [
    ({"epochfs.io/remote": "ftp://" + "x" * 2000}, "is not a dataset URL"),
    ({"epochfs.io/remote": "s3://" + "B" * 2000 + "/k"}, "bucket"),
    ({"epochfs.io/profile": "p" * 2000}, "no profile"),
    ({"epochfs.io/capacity": "1" * 2000 + "x"}, "is not a size"),
    ({"epochfs.io/shard-index": "x" * 2000}, "is neither a number nor a field path"),
    ({"epochfs.io/inject": "yes" * 1000}, 'is neither "true" nor "false"'),
])
def test_a_long_value_is_cut_in_the_refusal(running: Running, annotations: dict[str, str], said: str) -> None:
    """Values under the length epochfs reads reach their checks, and the refusal quotes the first
    characters of the value and says how long it was."""
    [value] = annotations.values()
    message = _refusal(running.client, annotations)
    assert said in message and len(message) <= MAX_MESSAGE_CHARS, message
    assert value[:50] in message and "characters)" in message


def test_a_shard_annotation_of_thousands_of_digits_is_refused_not_an_error(running: Running) -> None:
    """The completion index a profile of nodes > 1 reads from the pod: Python refuses to convert
    more than 4,300 digits to a number, which answered the review 500."""
    pod = job_pod(job(index=1, annotations={"epochfs.io/profile": "multi"}), index=1)
    pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] = "1" * 5000
    response = running.client.review(pod)["response"]
    assert response["allowed"] is False, response
    message = response["status"]["message"]
    assert "is not one of 0..3" in message and "(5000 characters)" in message


def test_a_huge_pod_name_is_cut_in_the_log(running: Running) -> None:
    """The API server checks a name's length after the mutating webhooks: the log line cuts it."""
    pod = _asking({"epochfs.io/profile": "none"})
    del pod["metadata"]["generateName"]
    pod["metadata"]["name"] = "n" * HUGE
    response = running.client.review(pod)["response"]
    assert response["allowed"] is False
    [line] = [x for x in running.log.read_text().splitlines() if "nnnnnnnn" in x]
    assert f"({HUGE} characters)" in line and len(line) < 2 * MAX_MESSAGE_CHARS, line[:300]
