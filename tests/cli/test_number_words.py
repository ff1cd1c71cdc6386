"""A value that is not the number a setting takes is refused in words naming the kind wanted and
the value given, never in ``int()``'s or ``float()``'s ("invalid literal for int() with base 10",
"could not convert string to float: ''"); a size that rounds down to 0 bytes is "below 1 byte",
not "must be positive"; a schedule field given twice is refused, not taken last (found by an
exploratory bad-input run). The real parser, and the real console script once."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from epochfs.sidecar import config
from epochfs.sidecar.config import ConfigError

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
REQUIRED = ["--cache", "/c", "--remote", "s3://b/x"]


@pytest.mark.parametrize(("argv", "env", "said"), [
    (["--seed", "abc"], {}, "--seed: must be a whole number, got 'abc'"),
    (["--retries", "1.5"], {}, "--retries: must be a whole number, got '1.5'"),
    ([], {"EPOCHFS_CONCURRENCY": ""},
     "--concurrency (from EPOCHFS_CONCURRENCY): must be a whole number, got ''"),
    (["--headroom", "x"], {}, "--headroom: must be a number, got 'x'"),
    ([], {"EPOCHFS_HEADROOM": " "}, "--headroom (from EPOCHFS_HEADROOM): must be a number, got ''"),
    (["--capacity", "0.5"], {}, "--capacity: '0.5' is below 1 byte (sizes count whole bytes)"),
    (["--max-rate", "0.1"], {}, "--max-rate: '0.1' is below 1 byte (sizes count whole bytes)"),
    (["--capacity", "0"], {}, "--capacity: must be positive"),
    (["--schedule", "initial=10,initial=20"], {}, "--schedule: initial given twice"),
    (["--schedule", "initial=1e999"], {}, "--schedule: initial must be a whole number, got '1e999'"),
    (["--schedule", "growth=fast"], {}, "--schedule: growth must be a number, got 'fast'"),
])
def test_a_value_of_the_wrong_kind_is_refused_in_words(argv: list[str], env: dict[str, str],
                                                       said: str) -> None:
    with pytest.raises(ConfigError) as refused:
        config.parse(config.SamplerSettings, [*REQUIRED, *argv], env)
    assert str(refused.value) == said


def test_the_console_script_says_it_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EPOCHFS_")}
    r = subprocess.run([EPOCHFS, "sample", "--cache", str(tmp_path / "c"), "--remote", tmp_path.as_uri(),
                        "--seed", "abc"], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2, r.stderr
    assert r.stderr == "epochfs sample: --seed: must be a whole number, got 'abc'\n", r.stderr
    assert not (tmp_path / "c").exists()
