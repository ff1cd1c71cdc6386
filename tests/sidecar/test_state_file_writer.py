"""The supervisor's state file (``epochfs status`` reads it) goes through the sidecar's one atomic
writer (:func:`epochfs.sidecar.store.objects.replace_file`): a write that fails midway leaves the
old document whole and no temp beside it in the cache folder.

The failure is the kernel's own: the supervisor's code runs in a process of its own whose
``RLIMIT_FSIZE`` lets no file grow past 64 bytes, so the new document's write stops partway
with ``EFBIG`` (the way a full volume stops it with ``ENOSPC``, without filling one). The
supervisor's parts are the real ones (:class:`Observability` and :class:`ChildProcesses` over a
real :class:`Child`), without the children a whole supervisor would start.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from epochfs.sidecar.supervisor import STATE_FILE_NAME

WRITER = r'''
import json, resource, signal, sys, threading, time
from pathlib import Path
from epochfs.sidecar.supervisor import Child, ChildProcesses, Observability, STATE_FILE_NAME


class StateWriter(ChildProcesses, Observability):
    """The supervisor's parts that decide and write the state file, on one cache."""

    def __init__(self, cache):
        self.cache, self.mount, self._store, self._seen = cache, cache / "mnt", None, {}
        self._children_lock, self._stop = threading.RLock(), threading.Event()
        self.sampler = Child(name="sampler", argv=[], settings_env={},
                             waiting="remote unreachable: the test's", next_start=time.monotonic() + 600)


cache = Path(sys.argv[1])
writer = StateWriter(cache)
writer._save_state()  # retry 1 of a sampler waiting for its restart
first = (cache / STATE_FILE_NAME).read_text()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of the signal's kill
resource.setrlimit(resource.RLIMIT_FSIZE, (64, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
writer.sampler.restarts = 1  # retry 2: a new document to write
writer._save_state()
print(json.dumps({"first": first, "error": writer._seen.get("state_error")}))
'''


def test_a_state_file_write_that_fails_midway_keeps_the_old_file_and_leaves_no_temp(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    run = subprocess.run([sys.executable, "-c", WRITER, str(cache)], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    said = json.loads(run.stdout)
    assert said["error"] is not None and "too large" in said["error"], said  # the write did fail
    assert json.loads(said["first"])["sampler"]["retry"] == 1
    assert (cache / STATE_FILE_NAME).read_text() == said["first"], "the old document, whole"
    assert sorted(p.name for p in cache.iterdir()) == [STATE_FILE_NAME], "a temp left in the cache"
    assert f"writing {cache / STATE_FILE_NAME}" in run.stderr  # logged, not raised
