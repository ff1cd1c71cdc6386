"""Redaction is linear in its text: a megabyte of letters, of one URL's userinfo or of ``://``
repeated is redacted in one pass, so a hostile value logged in the webhook's refusal (an annotation
may hold 256 KiB, a request 2 MiB) cannot hold the GIL and stop the process's other threads.

Each text is redacted in a child process given :data:`LIMIT` seconds in all. A pattern that scans
the rest of a run of letters from each of its letters (quadratic: 40,000 letters took 2 s) needs
many minutes for the first of them, and the child is killed at the limit: the test fails with
``TimeoutExpired``. The limit is far above what one linear pass takes on any machine, so the test
never measures speed, only that the work finishes.
"""

from __future__ import annotations

import json
import subprocess
import sys

from epochfs.sidecar.redact import redact

MEGABYTE = 1 << 20
LIMIT = 60.0

CHILD = r"""
import json, logging, sys
from epochfs.sidecar.redact import RedactingFilter, redact
n = int(sys.argv[1])
texts = {
    "letters": "a" * n,
    "userinfo": "ftp://" + "x" * n + "'",
    "schemes": "a://" * (n // 4),
    "colons": "a:" * (n // 2),
    "signatures": "sig=" * (n // 4),
    "tail": "a" * n + " http://user:s3cr3t@host/x",
}
out = {name: redact(text) for name, text in texts.items()}
record = logging.LogRecord("t", logging.INFO, "child", 1, "refused %s", ("ftp://" + "x" * n,), None)
RedactingFilter().filter(record)
out["record"] = record.getMessage()
print(json.dumps({name: [len(v), v[-40:]] for name, v in out.items()}))
"""


def test_a_megabyte_of_hostile_text_is_redacted_in_one_pass() -> None:
    proc = subprocess.run([sys.executable, "-c", CHILD, str(MEGABYTE)], capture_output=True,
                          text=True, timeout=LIMIT, check=True)
    seen = json.loads(proc.stdout)
    assert seen["letters"] == [MEGABYTE, "a" * 40]
    assert seen["userinfo"][0] == MEGABYTE + 7  # no "@": nothing to redact
    assert seen["record"][0] == MEGABYTE + len("refused ftp://")
    assert seen["tail"][1].endswith(" http://***:***@host/x")


def test_userinfo_after_a_long_run_of_scheme_characters_is_redacted() -> None:
    """The userinfo is found from its ``://``, so a scheme of any length (a run of letters, dots,
    dashes and pluses before ``://``) does not let a password through."""
    run = "x" * 100 + ".a-b+"
    assert redact(f"{run}http://u:pw@h/k") == f"{run}http://***:***@h/k"
    assert redact(f"endpoint {run}s3://token@h") == f"endpoint {run}s3://***@h"
    assert redact("1+x://u:pw@h") == "1+x://***:***@h"
