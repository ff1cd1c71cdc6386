"""A scrape that meets a child's metrics file created and not yet sized does not fail.

prometheus-client creates a child's mmap file and then sizes it; read in between, the empty file
was taken for a header and the whole scrape failed (``metrics collection failed: ...
unpack_from requires a buffer of at least 4 bytes``, met by the full suite right after a
sampler's restart). A real child process writes its counter into a real folder beside such a
file, and the sidecar's collector reads both.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from epochfs.sidecar.metrics_merge import multiprocess_collector

CHILD = textwrap.dedent("""
    from prometheus_client import Counter
    Counter("epochfs_test_things", "things").inc(7)
""")


def test_a_file_not_yet_sized_is_passed_over(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-c", CHILD], check=True, timeout=60,
                   env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)})
    (tmp_path / "counter_999999.db").touch()  # a starting child's, before its first sizing
    values = {s.name: s.value for m in multiprocess_collector(tmp_path).collect() for s in m.samples}
    assert values.get("epochfs_test_things_total") == 7.0, values
