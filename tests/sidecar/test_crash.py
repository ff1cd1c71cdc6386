"""kill -9 of ``epochfs sample`` at random moments, then restart: nothing corrupt, nothing lost.

Each round starts the sampler on the same cache, lets it run until a randomly chosen amount of
progress is observable (including none: killed while listing), records the live epochs, and kills
it with SIGKILL. Then recovery must find an intact index, drop no row (every listed sample's object
was complete on disk before its row was committed), and every epoch listed before the kill must
list the same files with the same bytes, unless the sampler cut enough epochs between the look and
the kill to retire it by ``--keep-epochs`` (then at least that many newer ones are live).
"""

from __future__ import annotations

import contextlib
import random
import signal
from pathlib import Path
from typing import Any

import pytest
from common import S3Server, put_objects, wait_until
from sampler_helpers import SamplerProc, running_sampler, s3_env, start_sampler, verify_cache

from epochfs.sidecar.store import Store

KEEP_EPOCHS = 2


def dataset(seed: int) -> dict[str, bytes]:
    rng = random.Random(seed)
    return {
        f"train/{i:04d}.bin": rng.randbytes(rng.choice([0, 1, 4096, 50_000, 300_000, 1_500_000]))
        for i in range(80)
    }


def crash_rounds(s3: S3Server, tmp_path: Path, rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    objects = dataset(seed)
    put_objects(s3, "bkt", objects)
    cache = tmp_path / "cache"
    # The shortest --retire-grace: each turn of the full cache waits for a retired epoch's grace.
    args = ["--endpoint-url", s3.endpoint, "--capacity", "6Mi", "--cut-interval", "0.2", "--retire-grace",
            "1", "--keep-epochs", str(KEEP_EPOCHS), "--concurrency", str(rng.choice([2, 8, 32]))]
    for r in range(rounds):
        sp = start_sampler(cache, "s3://bkt", *args, env=s3_env(s3.endpoint))
        try:
            before = sp.stats()["fetched_total"] if r else 0
            step = rng.choice([0, 1, 3, 10, 25])
            def progressed(sp: SamplerProc = sp, goal: int = before + step) -> bool:
                return sp.stats()["fetched_total"] >= goal or not sp.alive()

            wait_until(progressed, what=f"round {r}: {step} more samples", interval=0.01)
            listed: dict[int, list[Any]] = {}
            with Store(cache) as store:
                for e in store.epochs():
                    # The running sampler cuts every 0.2 s and retires past --keep-epochs: an epoch
                    # listed by the first look may be retired by the second (KeyError).
                    with contextlib.suppress(KeyError):
                        listed[e.epoch] = store.epoch_files(e.epoch)
        finally:
            sp.proc.send_signal(signal.SIGKILL)
            sp.proc.wait()
        assert sp.proc.returncode == -signal.SIGKILL, sp.log_text()[-2000:]
        with Store(cache) as store:
            report = store.recover()
            assert report.integrity == "ok"
            assert report.repairs_marked == 0, f"round {r}: {report}"
            live = {e.epoch for e in store.epochs()}
            for n, files in listed.items():
                if n not in live:
                    # The sampler went on cutting between the look and the kill: an epoch with
                    # KEEP_EPOCHS newer live ones was retired by policy, not lost in the crash.
                    newer = sum(1 for m in live if m > n)
                    assert newer >= KEEP_EPOCHS, f"round {r}: epoch {n} disappeared in the crash"
                    continue
                assert store.epoch_files(n) == files, f"round {r}: epoch {n} changed"
        verify_cache(cache, objects)
    with running_sampler(cache, "s3://bkt", *args, env=s3_env(s3.endpoint)) as sp:
        # fetched_total counts over the cache's life: above what the crashed rounds left, not above
        # 0 (true from the first round on, so that wait passed with a sampler that fetched nothing).
        fetched = sp.stats()["fetched_total"]
        wait_until(lambda: sp.stats()["fetched_total"] > fetched, what="sampling after the last crash")
    verify_cache(cache, objects)


@pytest.mark.long
def test_kill_9_a_few_rounds(s3: S3Server, tmp_path: Path) -> None:
    crash_rounds(s3, tmp_path, rounds=4, seed=11)


@pytest.mark.slow
def test_kill_9_many_rounds(s3: S3Server, tmp_path: Path) -> None:
    crash_rounds(s3, tmp_path, rounds=25, seed=12)
