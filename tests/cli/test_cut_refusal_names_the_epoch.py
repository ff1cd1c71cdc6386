"""``epochfs cut`` in schedule mode says what the asked epoch's window lacks.

Asked for ``--epoch 5`` on a fresh cache it gave epoch 0's figures, "epoch 0 would hold 50 of the
50 sample(s) its condition needs": a condition that holds, about another epoch, so an operator
could not tell what was missing; and past epoch 0 a plain ``epochfs cut`` said "N sample(s)
complete, condition not met" without naming the window. The real command on a real cache whose
complete catalog lists 100 keys, windows of 10 × 1.5^N of them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from store_helpers import listed_store, put, sampling_order

from epochfs.sidecar.store.records import Policy, Schedule

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
KEYS = [f"train/{i:03d}.bin" for i in range(100)]


def cut(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([EPOCHFS, "cut", "--cache", str(cache), *args], capture_output=True, text=True,
                          timeout=60)


def test_the_refusal_names_the_asked_epochs_window(tmp_path: Path) -> None:
    policy = Policy(capacity=1 << 30, headroom=0.0, schedule=Schedule(initial=10, growth=1.5))
    with listed_store(tmp_path, KEYS, policy, 100) as store:
        for key in sampling_order(0, KEYS)[:10]:  # epoch 0's window, whole
            put(store, key)
    cache = tmp_path / "cache"
    refused = cut(cache, "--epoch", "5")
    assert refused.returncode == 1, refused
    assert refused.stderr == ("epochfs: cannot cut yet: epoch 5's schedule window holds 10 of its 76 "
                              "sample(s) (use --force to cut what is there)\n"), refused.stderr
    done = cut(cache)
    assert (done.returncode, done.stdout) == (0, "0\n"), done
    refused = cut(cache)
    assert refused.returncode == 1, refused
    assert "epoch 1's schedule window holds 10 of its 15 sample(s)" in refused.stderr, refused.stderr


def test_a_min_samples_above_the_window_is_named(tmp_path: Path) -> None:
    policy = Policy(capacity=1 << 30, headroom=0.0, min_samples=90, schedule=Schedule(initial=10, growth=1.5))
    with listed_store(tmp_path, KEYS, policy, 100) as store:
        for key in sampling_order(0, KEYS)[:10]:
            put(store, key)
    refused = cut(tmp_path / "cache", "--epoch", "3")
    assert refused.returncode == 1, refused
    assert ("epoch 3's schedule window holds 10 of its 34 sample(s); --min-samples 90 is more than it "
            "holds: it is never cut") in refused.stderr, refused.stderr
