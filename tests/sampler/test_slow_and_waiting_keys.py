"""Keys that a misbehaving server would keep out of reach, through the real ``epochfs sample``
against moto behind a small proxy of its own (:mod:`pacing_proxy`):

- a server that trickles a body (a byte at a time, never silent for a read timeout) holds no
  download slot for ever: the download is abandoned as stalled, retried, then skipped, each time
  logged with its key, and the other objects are fetched;
- one key that the store always throttles is throttled on its own: said in the log and the
  progress line, never skipped, while every other key is fetched;
- a key that timed out is held in sight (logged, counted in the progress line) and fetched again,
  then skipped, while another download keeps the loop busy.

Each assertion is on what happened (keys fetched, skipped, named), never on how long it took."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from common import S3Server, put_objects, random_objects, wait_until
from pacing_proxy import PacingProxy
from sampler_helpers import running_sampler, s3_env

PORTS = iter(range(30310, 30399))


@pytest.fixture
def proxy(s3: S3Server) -> Iterator[PacingProxy]:
    for port in PORTS:
        try:
            with PacingProxy(s3.endpoint, port) as p:
                yield p
            return
        except OSError:  # in use
            continue
    raise RuntimeError("no free port in 30310-30398")


def test_a_trickling_server_holds_no_download_slot(s3: S3Server, proxy: PacingProxy,
                                                   tmp_path: Path) -> None:
    objects = random_objects(10, 5000, prefix="d/good/")
    objects.update(random_objects(3, 2000, prefix="d/TRICKLE", seed=1))
    put_objects(s3, "bkt", objects)
    cache = tmp_path / "cache"
    with running_sampler(cache, "s3://bkt", "--endpoint-url", proxy.endpoint, "--concurrency", "2",
                         "--read-timeout", "1", "--retries", "2", env=s3_env(s3.endpoint)) as sp:
        # The two slots are the trickles' first: at a byte every 0.2 s each would take 400 s.
        wait_until(lambda: sp.stats()["samples"] == 10 and sp.stats()["skipped_total"] == 3,
                   timeout=90, what="the good objects fetched, the trickling ones skipped")
        log = sp.log_text()
    stalled = set(re.findall(r"download of '(d/TRICKLE\d+\.bin)' stalled", log))
    assert stalled == {k for k in objects if "TRICKLE" in k}, log[-3000:]
    assert proxy.count("TRICKLE") == 3 * 2  # each abandoned and retried (--retries 2), then skipped
    assert re.search(r"skipping 'd/TRICKLE\d+\.bin': gave up after 2 attempts: SlowBody", log)


@pytest.mark.long
def test_one_key_throttled_on_its_own_is_deferred_alone(s3: S3Server, proxy: PacingProxy,
                                                        tmp_path: Path) -> None:
    objects = random_objects(400, 2000, prefix="d/")
    put_objects(s3, "bkt", {**objects, "d/SLOWD.bin": b"x" * 2000})
    cache = tmp_path / "cache"
    with running_sampler(cache, "s3://bkt", "--endpoint-url", proxy.endpoint, "--concurrency", "8",
                         env=s3_env(s3.endpoint)) as sp:
        wait_until(lambda: sp.stats()["samples"] == len(objects), timeout=90,
                   what="every other object fetched")
        wait_until(lambda: "'d/SLOWD.bin' is throttled on its own" in sp.log_text(), timeout=30,
                   what="the key named as throttled on its own")
        wait_until(lambda: re.search(r"1 throttled \(1 on their own, the oldest for \d+s\)",
                                     sp.log_text()), timeout=30,
                   what="the progress line counting it")
        asked = proxy.count("SLOWD")
        wait_until(lambda: proxy.count("SLOWD") > asked, timeout=60, what="the key asked again")
        assert sp.stats()["skipped_total"] == 0  # throttling never skips a key


@pytest.mark.long
def test_a_held_key_is_seen_and_retried_while_the_loop_is_busy(s3: S3Server, proxy: PacingProxy,
                                                               tmp_path: Path) -> None:
    objects = random_objects(5, 2000, prefix="d/good/")
    # 8 MiB at 64 KiB/s: in flight for two minutes, above the rate floor all along.
    put_objects(s3, "bkt", {**objects, "d/HANG.bin": b"h" * 2000,
                            "d/DRIP.bin": random_objects(1, 8 << 20)["train/00000.bin"]})
    cache = tmp_path / "cache"
    with running_sampler(cache, "s3://bkt", "--endpoint-url", proxy.endpoint, "--concurrency", "4",
                         "--read-timeout", "1", "--retries", "1", "--capacity", "64Mi",
                         env=s3_env(s3.endpoint)) as sp:
        wait_until(lambda: "holding 'd/HANG.bin'" in sp.log_text(), timeout=60, what="the held key named")
        wait_until(lambda: re.search(r"throttled, 1 held;", sp.log_text()), timeout=30,
                   what="the progress line counting it")
        # Fetched again, failed again, then skipped, while DRIP.bin's download keeps the loop busy.
        wait_until(lambda: "skipping 'd/HANG.bin'" in sp.log_text(), timeout=60,
                   what="the held key skipped after its second hold")
        assert proxy.count("HANG") == 2
        assert sp.stats()["samples"] == len(objects)  # DRIP.bin still downloading
        assert proxy.count("DRIP") == 1
