"""A size is parsed in one pass over its text: ``--capacity`` (or a webhook annotation, or an
``EPOCHFS_*`` variable) of thousands of digits followed by a character no size has is refused at
once, not after a regex tries every split of the digits between two ``[0-9]`` runs (quadratic:
8,192 digits took 5.7 s of CPU under the GIL).

The parse runs in a child process given :data:`LIMIT` seconds in all; a quadratic pattern needs
many minutes for the first text and the child is killed at the limit (``TimeoutExpired``). The
limit is far above what one linear pass takes, so the test never measures speed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from epochfs.sidecar.confparse import parse_size

LIMIT = 60.0

CHILD = r"""
import json, sys
from epochfs.sidecar.confparse import parse_size
n = int(sys.argv[1])
out = {}
for name, text in {"digits": "9" * n + "x", "fraction": "1." + "9" * n + "x", "dots": "." + "9" * n + ".",
                   "spaces": "1" + " " * n + "x", "trailing": "1Gi" + " " * n + "x"}.items():
    try:
        parse_size(text)
        out[name] = "parsed"
    except ValueError as e:
        out[name] = str(e)[:40]
print(json.dumps(out))
"""


def test_a_long_run_of_digits_is_refused_in_one_pass() -> None:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(200_000)], capture_output=True, text=True,
                          timeout=LIMIT, check=True)
    seen = json.loads(proc.stdout)
    assert all(v.startswith("not a size:") for v in seen.values()), seen


@pytest.mark.parametrize(("text", "size"), [("4096", 4096), ("1.5Ki", 1536), (".5Ki", 512),
                                            ("20Gi", 20 << 30), ("1 MiB", 1 << 20), ("7b", 7),
                                            (" 2 Ki ", 2048)])
def test_the_sizes_it_took_it_takes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["1.", ".", "1.2.3", "", "Gi"])
def test_what_it_refused_it_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size(text)
