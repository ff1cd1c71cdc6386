"""Second links of damaged files that a take-out left in ``quarantine/`` when it was cut short.

A take-out (:mod:`.integrity`: the scrub, ``epochfs verify``, the object scan) links a damaged
object file to ``quarantine/.<sid>.<pid>.tmp`` inside its write transaction, and renames that link
to ``quarantine/<sid>`` after the commit. Killed between the two (``verify`` stopped by SIGTERM or
kill -9), the link stayed under its hidden name for ever: once the repair replaced the object, the
only copy of the damaged bytes, on the cache's volume outside ``--capacity``, that nothing counted
or removed, and absent from ``quarantine.log``. Start-up recovery finishes them: each becomes
``quarantine/<sid>`` with its line in the log, as the take-out would have made it (or is removed
where that name is taken already). A live process's link is left alone
(:func:`~.objects.writer_gone`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from pathlib import Path

from epochfs.sidecar.store.integrity import QUARANTINE_DIR, QUARANTINE_LOG
from epochfs.sidecar.store.objects import writer_gone

log = logging.getLogger("epochfs.store")


def finish_strays(root: Path) -> int:
    """Finish the hidden links of dead take-outs in ``root/quarantine``; returns how many."""
    folder = root / QUARANTINE_DIR
    done = 0
    for temp in folder.glob(".*.tmp") if folder.is_dir() else ():
        sid, _, pid = temp.name[1:-len(".tmp")].rpartition(".")
        if not sid or not writer_gone(pid):
            continue
        target = folder / sid
        with contextlib.suppress(FileNotFoundError):
            if target.exists():
                temp.unlink()
            else:
                os.replace(temp, target)
                note = {"time": time.time(), "sid": sid, "problem": "taken out by a run that was cut "
                        "short before it moved the file here (finished at a later start)"}
                with contextlib.suppress(OSError), open(folder / QUARANTINE_LOG, "a", encoding="utf-8") as f:
                    f.write(json.dumps(note) + "\n")
            done += 1
    if done:
        log.warning("recovery: %d damaged file(s) a cut-short take-out left in %s/ under hidden names "
                    "finished as %s/<sample id> (listed in %s)", done, QUARANTINE_DIR, QUARANTINE_DIR,
                    QUARANTINE_LOG)
    return done


__all__ = ["finish_strays"]
