"""One download by the real :class:`~epochfs.sidecar.download.Downloader` through the ``file://``
remote, in a child process run under the real ``strace``: what the kernel was asked while the
body was written (tests/remote/test_early_writeback.py, tests/remote/test_direct_writes.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

CHILD = textwrap.dedent("""
    import hashlib, sys, threading
    from pathlib import Path
    from epochfs.sidecar.download import Downloader, RetryPolicy
    from epochfs.sidecar.remote import open_remote
    from epochfs.sidecar.store import Candidate, Store

    data, cache, direct = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "direct"
    store = Store(cache, create=True)
    remote = open_remote(f"file://{data}")
    listed = {str(o.key): o for o in remote.list()}["big.bin"]
    dl = Downloader(store=store, remote=remote, stop=threading.Event(),
                    retry=RetryPolicy(attempts=1, base=0.0, cap=0.0), direct=direct)
    sid = hashlib.blake2b(b"big.bin", digest_size=16).hexdigest()
    result = dl.fetch(Candidate("big.bin", sid, listed.size, listed.version))
    assert result.error is None and result.admission is not None, result.error
    print(result.admission.temp)
""")


@dataclass
class Traced:
    temp: Path
    """The download's temp file (left in place: its bytes are the body's, checked by the caller)."""
    fd: str
    """The temp file's descriptor in the child."""
    flags: list[str]
    """The flags the temp file was opened with."""
    lines: list[str]
    """strace's lines of the thread that wrote it."""


def traced_download(tmp_path: Path, body: bytes, calls: str, *, direct: bool) -> Traced:
    """Fetch ``body`` (as ``big.bin``) into a new cache under ``tmp_path`` with ``strace -e
    trace=openat,<calls>``; asserts the download succeeded and the temp file was opened once."""
    strace = shutil.which("strace")
    assert strace is not None, "strace is a test dependency (Makefile APT_PACKAGES)"
    data = tmp_path / "data"
    data.mkdir()
    (data / "big.bin").write_bytes(body)
    log = tmp_path / "strace"  # one file per thread (-ff): a call is never split across lines
    out = subprocess.run(
        [strace, "-ff", "-qq", "-e", f"trace=openat,{calls}", "-o", str(log), sys.executable, "-c", CHILD,
         str(data), str(tmp_path / "cache"), "direct" if direct else "buffered"],
        capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    temp = Path(out.stdout.strip())
    opening = r'openat\(.*"' + re.escape(str(temp)) + r'", ([A-Z_|]+)(?:, \d+)?\)\s+= (\d+)$'
    threads = [f.read_text().splitlines() for f in tmp_path.glob("strace.*")]
    lines = next((t for t in threads if any(re.search(opening, line) for line in t)), [])
    opened = [(m.group(1), m.group(2)) for line in lines if (m := re.search(opening, line))]
    assert len(opened) == 1, f"the temp file opened once for writing: {opened}"
    # The calls from its opening on: its number may have named another file before (the remote's
    # folder, opened and closed to read the source relative to it).
    since = next(i for i, line in enumerate(lines) if re.search(opening, line))
    return Traced(temp, opened[0][1], opened[0][0].split("|"), lines[since + 1:])
