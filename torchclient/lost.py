"""A file the epoch lists whose sample the remote lost: one clear error, at once.

The sidecar repairs a damaged or deleted object in place (fetched again under the same name);
when the remote no longer has the sample's bytes it is marked *lost*: its entry stays in every live
epoch (an epoch never shrinks under a reader) and reading it fails until the epoch retires. The two
views fail differently, and this module turns both into :class:`SampleLostError`, an ``OSError``
with errno EIO that names the file and says why:

* the FUSE view shows the entry as a regular file and answers EIO to its open;
* the folder view's entry is a plain symlink to the object file, which is gone: the kernel answers
  ENOENT, which the client would otherwise retry for ``retry_seconds`` (a FUSE restart looks the
  same) and then report as a vanished file.

Both are recognised from what the mount shows, nothing else: the entry exists (``lstat``), as a
regular file answering EIO or as a symlink whose target is missing. The folder view publishes
which samples are lost, by path and object file, in ``.epochfs/lost.json`` (:data:`LOST_NAME`,
present while any is): a dangling entry is lost exactly when the record names its path and its
link ends in the record's object file, and any other dangling entry (a file deleted behind the
sidecar's back, waiting for its repair) is retried as before, then reported vanished. Without the
record (the FUSE view; a folder view from before it) the mount's ``status.json`` decides: it counts
lost samples (``lost``); a dangling symlink while other samples wait for their repair
(``repairing`` above ``lost``: those come back within seconds) is retried as before, and at the
end of the retries it is reported lost all the same (:func:`lost_error` with ``final``).

Standard library only (workers import it with the decoders).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from .layout import CONTROL_DIR, parse_epoch_name, read_status

T = TypeVar("T")

LOST_NAME = "lost.json"
"""The folder view's record of lost samples in ``.epochfs/``: ``{"count": N, "lost": [{"path":
<path inside the epochs>, "object": <object file under the link root>, "size": <bytes>}, ...]}``,
written by the publisher (``sidecar/folderview_lost.py``) while any sample is lost."""


class SampleLostError(OSError):
    """A file the epoch lists whose sample the remote lost (errno EIO); the message names the file.

    Constructible from one message string (the DataLoader re-raises a worker's exception that way),
    and it keeps errno EIO then too."""

    def __init__(self, msg: str, path: str | None = None) -> None:
        super().__init__(errno.EIO, msg, path)

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self.strerror, self.filename)


def _oserror(exc: BaseException) -> OSError | None:
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno is not None:
            return e
        e = e.__cause__ or e.__context__
    return None


def _mount_root(path: str) -> Path | None:
    """The mount (or published folder) above ``path``'s ``epoch-N`` folder, None outside one:
    the outermost ``epoch-N`` folder beside a ``.epochfs/`` folder (the mount's control folder),
    so that a dataset's own folder named ``epoch-3`` inside an epoch is not taken for it (its key
    and record were looked up in the wrong place, and a lost sample reported vanished). Without
    a control folder (a plain folder), the nearest ``epoch-N`` folder."""
    p = Path(path)
    nearest = found = None
    for parent in p.parents:
        if parse_epoch_name(parent.name) is not None:
            nearest = nearest or parent.parent
            if os.path.isdir(parent.parent / CONTROL_DIR):
                found = parent.parent
    return found or nearest


_records: dict[str, tuple[tuple[int, int, int], dict[str, str]]] = {}
_records_lock = threading.Lock()


def read_lost(root: str | os.PathLike[str]) -> dict[str, str] | None:
    """The folder view's lost samples under ``root`` (the published folder): path inside the
    epochs -> object file; None where there is no record (no sample lost, the FUSE view, an older
    sidecar) or it cannot be read. Parsed again only when the file changed (a loader meeting many
    lost samples reads it once)."""
    where = os.path.join(os.fspath(root), CONTROL_DIR, LOST_NAME)
    try:
        with open(where, "rb") as f:
            st = os.fstat(f.fileno())
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
            with _records_lock:
                cached = _records.get(where)
            if cached is not None and cached[0] == key:
                return cached[1]
            doc = json.loads(f.read())
        lost = {str(e["path"]): str(e["object"]) for e in doc["lost"]}
    except (OSError, ValueError, TypeError, KeyError):
        return None
    with _records_lock:
        _records[where] = (key, lost)
    return lost


def _recorded(path: str, root: Path) -> bool | None:
    """Whether the folder view's record names the entry ``path`` (a dangling symlink) as lost:
    its path inside its epoch, and its link ending in the recorded object file; None without a
    record."""
    lost = read_lost(root)
    if lost is None:
        return None
    rel = Path(path).relative_to(root)
    obj = lost.get("/".join(rel.parts[1:]))
    if obj is None:
        return False
    try:
        target = os.readlink(path)
    except OSError:
        return False
    return target == obj or target.endswith("/" + obj)


def lost_error(path: str, exc: BaseException, *, final: bool = False) -> SampleLostError | None:
    """The :class:`SampleLostError` to raise instead of ``exc`` (an open or read of ``path``, a
    file its epoch lists), or None when ``exc`` is not what a lost sample gives. ``final``: the
    retries are over, so a dangling symlink is lost even while other samples wait for repair."""
    err = _oserror(exc)
    if err is None or err.errno not in (errno.EIO, errno.ENOENT):
        return None
    try:
        st = os.lstat(path)
    except OSError:
        return None  # no entry at all: a mount away (restart) or a retired epoch, not a lost sample
    if err.errno == errno.EIO:
        how = "the FUSE view answers EIO"
        if not stat.S_ISREG(st.st_mode):
            return None
    else:
        how = "its entry is a symlink to an object file that is gone"
        if not stat.S_ISLNK(st.st_mode) or os.path.exists(path):
            return None
    root = _mount_root(path)
    if root is None:
        return None
    key = "/".join(Path(path).relative_to(root).parts[1:])
    recorded = _recorded(path, root) if err.errno == errno.ENOENT else None
    if recorded is False:
        return None  # the folder view says which samples are lost, and not this one
    status = read_status(root)
    if recorded is None:
        if not status:
            return None
        lost, repairing = int(status.get("lost") or 0), int(status.get("repairing") or 0)
        if lost <= 0 or (err.errno == errno.ENOENT and repairing > lost and not final):
            return None
    else:
        how = f"{how}; .epochfs/{LOST_NAME} lists it"
    count = int(status.get("lost") or 0) if status else 0
    lost_note = f"; {count} sample(s) lost" if count else ""
    return SampleLostError(
        f"sample {path} (key {key}) was lost from the remote: it cannot be fetched again, and its "
        f"epoch keeps listing it ({how}{lost_note}, see the sidecar's log); skip it or use a newer "
        "epoch", path)


def lost_aware(path: str, call: Callable[[], T]) -> Callable[[], T]:
    """``call`` (a read of ``path``), raising :class:`SampleLostError` instead of what a lost
    sample's entry gives, so that :func:`.retry.retrying` fails at once (EIO is not retried)."""

    def attempt() -> T:
        try:
            return call()
        except Exception as exc:
            lost = lost_error(path, exc)
            if lost is not None:
                raise lost from exc
            raise

    return attempt
