"""The sidecar's refusal of an index a newer epochfs wrote reaches ``--termination-log``.

In a pod, ``kubectl describe pod`` shows the container's termination message
(``terminationMessagePath``, the sidecar's ``--termination-log``): the sidecar writes there every
refusal of its start, as its children's (tests/cli/test_start_refusals.py). The supervisor's own
open of the cache's index refused a newer schema (a ``helm rollback`` onto a kept hostPath cache:
tests/store/test_newer_index_schema.py) on stderr only, so the pod showed no reason. A real
``epochfs sidecar`` on a real cache, its recorded schema version raised past this version's.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

from common import free_port

from epochfs.sidecar.store import INDEX_NAME, Meta, Policy, Store
from epochfs.sidecar.store.schema import SCHEMA_VERSION

EPOCHFS = str(Path(sys.executable).with_name("epochfs"))
NEWER = SCHEMA_VERSION + 1


def test_the_newer_index_refusal_is_the_termination_message(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with Store(cache, create=True) as store:
        store.configure(Policy(capacity=64 * 2**20))
    db = sqlite3.connect(cache / INDEX_NAME)
    try:
        db.execute("UPDATE meta SET value=? WHERE name=?", (str(NEWER), Meta.SCHEMA_VERSION.value))
        db.commit()
    finally:
        db.close()
    (tmp_path / "data").mkdir()
    view = tmp_path / "view"
    view.mkdir()
    term = tmp_path / "termination-log"
    term.touch()  # as in a pod: Kubernetes makes the file, the sidecar writes only where it exists
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(
        [EPOCHFS, "sidecar", "--cache", str(cache), "--remote", (tmp_path / "data").as_uri(),
         "--capacity", "64Mi", "--mount", str(view), "--health-port", str(free_port()),
         "--termination-log", str(term)],
        capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    said = proc.stderr.strip().splitlines()[-1]
    assert "written by a newer epochfs" in said, proc.stderr
    assert term.read_text().strip() == said, "the termination message is the refusal's line"
