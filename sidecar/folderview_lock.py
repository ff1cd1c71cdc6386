"""The locks an ``epochfs publish`` process holds: one publisher per folder, and the cache's
publisher lock, taken as soon as it is free.

**One publisher per folder.** A publisher's recovery removes every temporary name in the folder
(``.epochfs-*`` trees, ``.epochfs/.tmp-*`` files): those of a publisher that was killed, but just as
well the tree another running publisher of the same ``--mount`` is building ahead, which then died
on a missing file (and, restarted, did the same to the first). So before its recovery a publisher
takes an exclusive ``flock`` on :data:`FOLDER_LOCK_NAME` in the folder's ``.epochfs/`` and holds it for
its life; a second one is refused at once (exit 2, one line naming the holder's pid), as a second
sampler or sidecar of a cache is (:mod:`.samplerlock`). The kernel drops the lock when its holder
dies, ``kill -9`` included, so the leftovers of a killed publisher are still recovered by the next.

**The cache's publisher lock follows the publishers.** Two publishers of one cache into two
folders may run; only one holds :mod:`~epochfs.sidecar.store.publisherlock`. When it stops, the
other must take it, else the sampler finds no publisher, stalls for ``GONE_AFTER`` seconds, then
retires and evicts without one while this one publishes. So a publisher without it tries again at
each step (one non-blocking ``flock``) and says so in one line when it gets it (:class:`CacheLock`).
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

from epochfs.sidecar.config import ConfigError
from epochfs.sidecar.folderview_built import FULL_ERRNOS
from epochfs.sidecar.store import publisherlock
from epochfs.torchclient.layout import CONTROL_DIR

log = logging.getLogger("epochfs.folderview")

FOLDER_LOCK_NAME = "publisher.lock"
"""The folder lock's file in ``<mount>/.epochfs/``; it holds the holder's pid (shown to a second
publisher). Not a temporary name nor a manifest, so recovery leaves it; readers never open it."""


def make_folder(folder: Path) -> Path:
    """Make ``folder`` and its ``.epochfs/`` (mode 755, whatever the umask) where missing and
    return the latter. A full volume's error is raised as it is (publishing pauses until there is
    room); any other is one line (:class:`ConfigError`): the settings' check passed, then the
    place changed."""
    try:
        folder.mkdir()
    except FileExistsError:
        pass  # the user's or the pod's folder: its mode is theirs
    except OSError as e:
        if e.errno in FULL_ERRNOS:
            raise
        raise ConfigError(f"--mount {folder}: cannot create it: {e.strerror}") from None
    else:  # made here: the trainer's user crosses it whatever the sidecar's umask (077: 0700)
        os.chmod(folder, 0o755)
    control = folder / CONTROL_DIR
    control.mkdir(exist_ok=True)
    os.chmod(control, 0o755)
    return control


class FolderLock:
    """The folder's publisher lock, held from :meth:`take` (before the first recovery) to :meth:`close`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.fd: int | None = None

    def take(self) -> None:
        """Take the lock (again a no-op once held). Refused at once, with :class:`ConfigError`
        naming the holder's pid, while another publisher holds it: nothing of the folder is touched
        then. A full volume's ``OSError`` (the folder or the file cannot be made) is raised as is."""
        if self.fd is not None:
            return
        path = make_folder(self.folder) / FOLDER_LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise ConfigError(f"--mount: {self.folder} is in use by another epochfs publish (pid {holder}); "
                              f"one publisher per folder") from None
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        try:  # best effort, as the cache's lock: the lock is the flock, a full volume still takes it
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as e:
            log.info("could not write the pid into %s (%s): the lock holds all the same", path,
                     os.strerror(e.errno) if e.errno else e)

    def close(self) -> None:
        """Release it (the process is stopping; nothing is written into the folder after this)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class CacheLock:
    """The cache's publisher lock (:mod:`~epochfs.sidecar.store.publisherlock`): taken after the
    first recovery (:meth:`take`) and, while another publisher holds it, tried again at each step
    (:meth:`retry`)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.fd: int | None = None
        self.tried = False

    def take(self) -> None:
        """The first try, after the first recovery: a warning when another publisher holds it."""
        self.fd = publisherlock.hold(self.root)
        self.tried = True

    def retry(self) -> None:
        """Cheap when held (nothing) and while refused (one non-blocking ``flock``)."""
        if not self.tried or self.fd is not None:
            return
        self.fd = publisherlock.try_hold(self.root)
        if self.fd is not None:
            log.info("took %s: the other publisher of this cache stopped, so this one keeps the shown "
                     "epochs' objects now", self.root / publisherlock.LOCK_NAME)

    def close(self) -> None:
        """Release it, after the publisher's close (the folder stays as published, its objects too)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
