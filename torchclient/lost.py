"""A file the epoch lists whose sample the remote lost: one clear error, at once.

The sidecar repairs a damaged or deleted object in place (fetched again under the same name);
when the remote no longer has the sample's bytes it is marked *lost*: its entry stays in every live
epoch (an epoch never shrinks under a reader) and reading it fails until the epoch retires. The two
views fail differently, and this module turns both into :class:`SampleLostError`, an ``OSError``
with errno EIO that names the file and says why:

* the FUSE view shows the entry as a regular file and answers EIO to its open;
* the folder view replaces the entry, in every published epoch that holds it, by its
  *placeholder*: a symlink of the same name whose target is that name and :data:`PLACEHOLDER_MARK`
  (:func:`placeholder_target`), a link to itself: every open answers **ELOOP** at once, a listing
  still shows it. ELOOP is never what a missing file or a restarting mount gives, so the
  placeholder alone says "lost" (:func:`is_placeholder`), record or not;
* before the placeholder is in place (the step that sees the loss writes the record first), or
  from a folder view before placeholders, the entry is a plain symlink to the object file, which is
  gone: the kernel answers ENOENT, which the client would otherwise retry for ``retry_seconds`` (a
  FUSE restart looks the same) and then report as a vanished file.

All are recognised from what the mount shows, nothing else: the entry exists (``lstat``), as a
regular file answering EIO, as the placeholder answering ELOOP, or as a symlink whose target is
missing. The folder view publishes
which samples are lost, by path and object file, in ``.epochfs/lost.json`` (:data:`LOST_NAME`,
present while any is): a dangling entry is lost exactly when the record names its path and its
link ends in the record's object file, and any other dangling entry (a file deleted behind the
sidecar's back, waiting for its repair) is retried as before, then reported vanished. Without the
record (the FUSE view; a folder view from before it) the mount's ``status.json`` decides: it counts
lost samples (``lost``); a dangling symlink while other samples wait for their repair
(``repairing`` above ``lost``: those come back within seconds) is retried as before, and at the
end of the retries it is reported lost all the same (:func:`lost_error` with ``final``).

Standard library only (workers import it with the decoders). It also holds
:func:`carry_attributes`, how the client's sample errors keep their attributes when a DataLoader
worker raised them.
"""

from __future__ import annotations

import ast
import errno
import json
import os
import stat
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from .layout import CONTROL_DIR, read_status
from .mountroot import mount_root

T = TypeVar("T")

LOST_NAME = "lost.json"
"""The folder view's record of lost samples in ``.epochfs/``: ``{"count": N, "lost": [{"path":
<path inside the epochs>, "object": <object file under the link root>, "size": <bytes>}, ...]}``,
written by the publisher (``sidecar/folderview_lost.py``) while any sample is lost."""

PLACEHOLDER_MARK = "lost-from-the-remote:see-.epochfs-lost.json"
"""The last part of a folder-view placeholder's target (:func:`placeholder_target`): what ``ls -l``
and ``readlink`` show of a lost sample's entry. One path component, under 255 bytes."""


def placeholder_target(name: str) -> str:
    """The target of the placeholder of entry ``name`` (its file name): ``<name>/`` and
    :data:`PLACEHOLDER_MARK`. Relative to the entry's own folder its first part is the entry
    itself, so resolving it never ends: open, stat and a walk into it answer ELOOP, for root too,
    on every file system, and nothing outside the folder is looked at. Why ELOOP and not another
    errno a symlink can give: docs/folderview.md, "A sample the remote lost"."""
    return f"{name}/{PLACEHOLDER_MARK}"


def is_placeholder(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a folder-view placeholder: a symlink whose target is
    :func:`placeholder_target` of its own name (no object file's link looks like that)."""
    try:
        return os.readlink(path) == placeholder_target(os.path.basename(os.fspath(path)))
    except (OSError, ValueError):
        return False


ATTRIBUTES_MARK = "epochfs-error-attributes:"
"""Starts the note (one line) that carries an error's attributes out of a DataLoader worker."""


def _in_dataloader_worker() -> bool:
    """Whether this process is a DataLoader worker (torch imported and its worker info set)."""
    data = sys.modules.get("torch.utils.data")
    info = getattr(data, "get_worker_info", None)
    return info is not None and info() is not None


def _literal(value: Any) -> Any:
    """``value`` where its repr reads back as it (str, int, tuple...), else that repr."""
    text = repr(value)
    try:
        if ast.literal_eval(text) == value:
            return value
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    return text


def carry_attributes(exc: BaseException, names: tuple[str, ...], msg: object) -> None:
    """Keep ``exc``'s attributes ``names`` across a DataLoader worker; call at the end of ``__init__``.

    Why: torch hands a worker's exception to the training process as its type and its formatted
    traceback only, and raises ``type(text)`` there (``ExceptionWrapper.reraise``): every attribute
    the docs promise (``.path``, ``.field``, ``.value``, ``.filename``) was None. So an error made
    in a worker adds a note (Python 3.11+; the traceback's text shows notes) of
    :data:`ATTRIBUTES_MARK` and the attributes, and one constructed from a single message with
    none of them set takes them back from the last such note in that message."""
    values = {name: getattr(exc, name, None) for name in names}
    if any(value is not None for value in values.values()):
        if hasattr(exc, "add_note") and _in_dataloader_worker():
            exc.add_note(f"{ATTRIBUTES_MARK} {({k: _literal(v) for k, v in values.items()})!r}")
        return
    if not isinstance(msg, str) or ATTRIBUTES_MARK not in msg:
        return
    line = msg[msg.rindex(ATTRIBUTES_MARK) + len(ATTRIBUTES_MARK):].split("\n", 1)[0]
    try:
        carried = ast.literal_eval(line.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return
    if isinstance(carried, dict):
        for name in names:
            if name in carried:
                setattr(exc, name, carried[name])


class SampleLostError(OSError):
    """A file the epoch lists whose sample the remote lost (errno EIO); the message names the file.

    Constructible from one message string (the DataLoader re-raises a worker's exception that way),
    and it keeps errno EIO then too, and ``filename`` (:func:`carry_attributes`)."""

    def __init__(self, msg: str, path: str | None = None) -> None:
        super().__init__(errno.EIO, msg, path)
        carry_attributes(self, ("filename",), msg)

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
    """The mount (or published folder) above the file ``path``'s ``epoch-N`` folder, None outside
    one (:func:`.mountroot.mount_root` of its folder: a dataset's own folder named ``epoch-3``
    inside an epoch is not taken for it, else its key and record were looked up in the wrong
    place, and a lost sample reported vanished)."""
    return mount_root(os.path.dirname(path))


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
    if err is not None and err.errno in (errno.ELOOP, errno.ENOENT) and is_placeholder(path):
        return _placeholder_error(path)  # ENOENT too: an open of the old link, checked after its swap
    if err is not None and err.errno == errno.ELOOP:
        return None  # a link loop of the dataset's own
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
        f"epoch keeps listing it ({how}{lost_note}, see the sidecar's log); {lost_advice(key)}", path)


def exact_glob(key: str, *, anchored: bool = True) -> str:
    """An ``exclude=`` pattern (:mod:`.globs`) that matches ``key`` (its path inside ``epoch-N/``)
    and nothing else: anchored at the epoch's root by a leading ``/`` (a bare name would match it
    at any depth), with ``*``, ``?`` and ``[`` each put in a set of its own (the globs have no
    backslash escapes). ``anchored=False`` where only the file's name is known: it matches that
    name at any depth."""
    return ("/" if anchored else "") + "".join(f"[{c}]" if c in "*?[" else c for c in key)


def lost_advice(key: str, *, anchored: bool = True) -> str:
    """What to do about the lost sample ``key``: the one remedy that works. A loader cannot skip
    one sample (a DataLoader's batch fails whole), and a newer epoch is no way out: in snapshot
    mode the epochs cut after the loss list it too until the cache turns over past it
    (docs/reliability.md, "A sample that cannot be repaired"); leaving it out with ``exclude=``
    reads all the others."""
    pattern = exact_glob(key, anchored=anchored)
    return (f"leave it out: make the loader or dataset again with exclude=[{pattern!r}] "
            "(added to any exclude= you pass); newer epochs may list it too until the cache turns "
            "over past it (docs/reliability.md, section 5, \"A sample that cannot be repaired\")")


def _placeholder_error(path: str) -> SampleLostError:
    """The error for ``path``, the folder view's placeholder: it says "lost" alone (no record or
    status is needed)."""
    root = _mount_root(path)
    key = "/".join(Path(path).relative_to(root).parts[1:]) if root is not None else os.path.basename(path)
    status = read_status(root) if root is not None else None
    count = int(status.get("lost") or 0) if status else 0
    lost_note = f"; {count} sample(s) lost" if count else ""
    return SampleLostError(
        f"sample {path} (key {key}) was lost from the remote: it cannot be fetched again, and its "
        f"epoch keeps listing it (the folder view's entry is a placeholder that answers ELOOP; "
        f".epochfs/{LOST_NAME} lists it{lost_note}, see the sidecar's log); "
        f"{lost_advice(key, anchored=root is not None)}", path)


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
