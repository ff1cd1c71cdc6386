"""Mount helpers: mount point checks, the read-only link root, waiting for and removing mounts.

Everything here works on paths and the kernel's mount table (``/proc/self/mountinfo``) and runs the
system's ``mount``/``umount``/``fusermount3`` binaries, so the supervisor can use it without
importing mfusepy (a FUSE server crash must not take the supervisor with it).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from epochfs.fuse.errors import MountError
from epochfs.sidecar.store.objects import OBJECTS_DIR, markers
from epochfs.sidecar.store.placement import over_cache, spelled

log = logging.getLogger("epochfs.fuse")

MOUNTINFO = Path("/proc/self/mountinfo")
DEFAULT_LINK_ROOT_NAME = "objects-ro"


@dataclass(frozen=True)
class MountEntry:
    """One line of the mount table. ``mount_id`` and ``device`` (its fields 1 and 3, the mount's ID
    and its file system's ``major:minor``) tell one mount from another made at the same path."""

    mount_point: str
    fstype: str
    source: str
    options: str
    mount_id: int = 0
    device: str = ""

    @property
    def read_only(self) -> bool:
        return "ro" in self.options.split(",")


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as ``\\ooo``."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mount_table() -> list[MountEntry]:
    """The current mounts, in mount order."""
    entries = []
    for line in MOUNTINFO.read_text().splitlines():
        left, _, right = line.partition(" - ")
        lf, rf = left.split(), right.split()
        if len(lf) < 6 or len(rf) < 2:
            continue
        entries.append(MountEntry(_unescape(lf[4]), rf[0], _unescape(rf[1]), lf[5], int(lf[0]), lf[2]))
    return entries


def canonical(path: Path) -> str:
    """``path`` as the mount table spells it (:func:`~epochfs.sidecar.store.placement.spelled`)."""
    return spelled(path)


def find_mount(path: Path) -> MountEntry | None:
    """The topmost mount at exactly ``path``, if any."""
    target = canonical(path)
    found = None
    for e in mount_table():
        if e.mount_point == target:
            found = e
    return found


def is_dead(path: Path, *, timeout: float = 5.0) -> bool:
    """True for a FUSE mount whose server is gone ("Transport endpoint is not connected") or does
    not answer within ``timeout`` seconds (a stopped or wedged server would block us forever).

    statfs goes to the server (the kernel caches no statfs answer); a stat may be answered from the
    kernel's attribute cache. The kernel answers statfs itself only to a caller the mount does not
    allow in (no ``allow_other`` and another uid, or another user namespace): our mounts use
    ``allow_other``, probed from their own namespace. It runs in a daemon thread so that a mount
    that never answers costs a stuck thread, not a hang.
    """
    outcome: list[bool] = []

    def probe() -> None:
        try:
            os.statvfs(path)
        except OSError as e:
            outcome.append(e.errno in (errno.ENOTCONN, errno.ECONNABORTED))
            return
        outcome.append(False)

    worker = threading.Thread(target=probe, name="epochfs-mount-probe", daemon=True)
    worker.start()
    worker.join(timeout)
    if not outcome:
        log.warning("%s: no answer from the mount within %.0fs; treating it as dead", path, timeout)
        return True
    return outcome[0]


def lazy_unmount(path: Path, *, any_kind: bool = False, layers: int = 8) -> bool:
    """Detach the FUSE mount(s) at ``path`` even if busy; True if no FUSE mount is left there.

    Only FUSE mounts are touched unless ``any_kind`` (for the read-only bind this package makes):
    in a pod, ``path`` or its parent is the shared volume's own mount point, and detaching that
    would cut the trainer off the volume for good. ``layers``: at most that many stacked mounts.
    """
    target = canonical(path)
    for _ in range(layers):  # mounts can be stacked; take them off one by one
        entry = find_mount(Path(target))
        if entry is None:
            return True
        if not any_kind and not entry.fstype.startswith("fuse"):
            log.debug("%s: %s mount on top is not ours to unmount", target, entry.fstype)
            return True
        commands: list[list[str]] = []
        if entry.fstype.startswith("fuse") and shutil.which("fusermount3"):
            commands.append(["fusermount3", "-u", "-z", target])
        commands.append(["umount", "-l", target])
        for cmd in commands:
            result = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if result.returncode == 0:
                log.info("unmounted %s (%s)", target, entry.fstype)
                break
            log.debug("%s: %s", " ".join(cmd), result.stderr.strip())
        else:
            return False
    entry = find_mount(Path(target))
    return entry is None or (not any_kind and not entry.fstype.startswith("fuse"))


def view_source(cache: Path) -> str:
    """The source the FUSE server mounts ``cache``'s view under (``epochfs:<cache>``, as the mount
    table shows it): how one server finds the other views of the same cache, so the cache's real
    path (two spellings through a symlink share one bind)."""
    return "epochfs:" + os.path.realpath(cache).replace(",", "_").replace("\\", "_")


def view_cache(entry: MountEntry) -> Path | None:
    """The cache a FUSE view serves, read back from its mount table entry (the source
    :func:`view_source` gave it): how ``epochfs unmount`` finds the read-only bind that a killed
    server left beside the view. None for any other mount, or a source that does not give back the
    path it names. (A ``,`` in the path is written ``_``: the path read back is then another, which
    holds the bind only if it is a cache whose bind no view uses, one its last server would remove.)"""
    prefix = "epochfs:"
    if not entry.fstype.startswith("fuse") or not entry.source.startswith(prefix):
        return None
    cache = Path(entry.source[len(prefix):])
    return cache if cache.is_absolute() and view_source(cache) == entry.source else None


def other_views(cache: Path, mine: Path | None = None) -> list[str]:
    """Mount points of the FUSE views of ``cache`` but ``mine`` in the mount table. Not probed for
    life: a view slow to answer would be taken for dead and lose the bind under its readers, and a
    probe waits up to 5 s a view at a server's exit; a dead view's mount keeps the bind until it is
    cleaned (a restart at its mount point cleans it first)."""
    source, skip = view_source(cache), canonical(mine) if mine is not None else None
    return [e.mount_point for e in mount_table()
            if e.fstype.startswith("fuse") and e.source == source and e.mount_point != skip]


def release_link_root(cache: Path, mine: Path | None = None) -> bool:
    """Unmount the cache's default read-only bind (:data:`DEFAULT_LINK_ROOT_NAME`) unless another
    live view of the cache reads through it; True when it was unmounted. Whoever made the bind:
    a second server over the cache reuses the first one's (and must not take it from under that
    one's readers when it stops), and a server restarted after a kill reuses the bind the killed
    one left (and removes it when it is the last)."""
    link_root = cache / DEFAULT_LINK_ROOT_NAME
    if find_mount(link_root) is None:
        return False
    users = other_views(cache, mine)
    if users:
        log.info("leaving the read-only bind %s mounted: the view at %s reads through it", link_root,
                 ", ".join(users))
        return False
    return lazy_unmount(link_root, any_kind=True)


def check_mount_apart(mount: Path, cache: Path, link_root: Path | None) -> None:
    """Refuse (MountError) a mount point at or under the cache's object files or the link root the
    epochs' symlinks point into: the view mounted there would hide the files its own symlinks
    name, and no sample could be read through it (the read-only bind of the default link root is
    under the cache too, and a FUSE mount on top of it shadows it). Refused as well: the cache
    folder itself, or a folder that holds it (the view would hide the store from the server that
    reads it, and the supervisor's check of an empty folder would pass before the store fills it),
    and a folder inside the cache (the store's own ``tmp/``, ``epochs/``: hidden by the view, the
    sampler's writes there fail for ever)."""
    for place in (cache / OBJECTS_DIR, cache / DEFAULT_LINK_ROOT_NAME, link_root):
        if place is None:
            continue
        place = Path(os.path.abspath(place))
        if mount == place or place in mount.parents:
            raise MountError(f"--mount: {mount} is inside {place}, where the epochs' files point: "
                             f"mount the view outside it (--mount {cache.parent / 'view'})")
    refused = over_cache(mount, cache)  # after the places above: their reason is the closer one
    if refused is not None:
        raise MountError(refused)


def check_mount_point(path: Path) -> None:
    """Make ready the folder the view is mounted at, or refuse it (MountError).

    A missing folder is created when its parent exists (in a pod: a subdirectory of the shared
    volume). A dead FUSE mount left by a crashed server is lazily unmounted first, so a restart
    never stacks mounts. Refused: a live mount, a folder that is a mount point of another kind
    (the shared volume's own mount point: a FUSE mount there would hide the volume from readers
    that started later, and a remount after a crash could never reach them), a file, a folder
    that is not empty.
    """
    entry = find_mount(path)
    if entry is not None and entry.fstype.startswith("fuse") and is_dead(path):
        log.warning("%s: dead mount (%s) from a previous server; unmounting it", path, entry.fstype)
        if not lazy_unmount(path):
            raise MountError(f"--mount: {path} holds a dead mount that could not be unmounted")
        entry = find_mount(path)
    if entry is not None and entry.fstype.startswith("fuse"):
        raise MountError(
            f"--mount: {path} is already a mount point ({entry.fstype} from {entry.source}); "
            f"unmount it first (epochfs unmount --mount {path})"
        )
    if entry is not None:
        raise MountError(
            f"--mount: {path} is already a mount point ({entry.fstype} from {entry.source}), such as a "
            f"shared volume's own: mount the view in a subdirectory of it (--mount {path}/view), so "
            f"that a restarted FUSE server reaches the readers that started before the restart"
        )
    if not path.exists() and not path.is_symlink():
        if not path.parent.is_dir():
            raise MountError(f"--mount: {path} does not exist, nor does its parent {path.parent}")
        try:
            path.mkdir(mode=0o755)
        except FileExistsError:
            pass  # made by a concurrent start
        except OSError as e:
            raise MountError(f"--mount: cannot create {path}: {e.strerror}") from None
        log.info("created the mount point %s", path)
    if not path.is_dir():  # a file; or a symlink whose folder is gone (not made: it may be a volume's)
        raise MountError(f"--mount: {path} is not a directory" if path.exists() else
                         f"--mount: {path} is a symlink to {os.readlink(path)}, which does not exist")
    if any(os.scandir(path)):
        raise MountError(f"--mount: {path} is not empty")


def bind_shows(source: Path, target: Path) -> bool:
    """Whether ``target`` shows the folder ``source`` names now: the same device and inode, and that
    folder still linked in its file system. A bind keeps the folder it was made of, not its path:
    once ``source`` is removed (``rm -rf objects/``, which the sampler then makes again and repairs
    into) the bind shows the deleted, empty folder (link count 0) and every epoch symlink into it
    answers ENOENT. False when either cannot be stat'ed (``source`` missing, nothing at ``target``)."""
    try:
        want, have = os.stat(source), os.stat(target)
    except OSError:
        return False
    return (want.st_dev, want.st_ino) == (have.st_dev, have.st_ino) and have.st_nlink > 0


def make_readonly_bind(source: Path, target: Path) -> bool:
    """Bind-mount ``source`` read-only at ``target``; returns True if this call mounted it.

    An existing read-only bind (left by a server that was killed, or another view's) is reused
    only while it shows ``source`` itself (:func:`bind_shows`); one of a folder since removed or
    replaced is detached and made again, or every read through it would fail. Nothing written
    through ``target`` can reach ``source``: even root gets EROFS.
    """
    source = Path(os.path.abspath(source))
    target = Path(os.path.abspath(target))
    entry = find_mount(target)
    if entry is not None:
        if entry.read_only and not is_dead(target) and bind_shows(source, target):
            log.info("reusing the read-only bind mount at %s", target)
            return False
        log.warning("%s: the %s mount there is not a live read-only bind of %s (its folder was "
                    "removed or replaced?); making it again", target, entry.fstype, source)
        lazy_unmount(target, any_kind=True)
    target.mkdir(parents=True, exist_ok=True)
    steps = (
        ["mount", "--bind", str(source), str(target)],
        ["mount", "-o", "remount,bind,ro", str(target)],
    )
    for cmd in steps:
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            lazy_unmount(target, any_kind=True)
            said = " ".join(result.stderr.split())  # one line: the sidecar keeps the child's last
            raise MountError(
                f"--link-root: cannot make a read-only bind mount of {source} at {target} "
                f"({said or 'mount failed'}); run with CAP_SYS_ADMIN or pass "
                f"--link-root with a read-only path to the objects folder"
            )
    if not os.statvfs(target).f_flag & os.ST_RDONLY:
        lazy_unmount(target, any_kind=True)
        raise MountError(f"--link-root: {target} did not become read-only")
    log.info("read-only bind mount of %s at %s", source, target)
    return True


def check_link_root(path: Path, *, warn: bool = True) -> None:
    """A user-given link root must exist; a writable one is allowed but warned about (``warn``:
    the supervisor checks it before its FUSE server does, which warns)."""
    if not path.is_absolute():
        raise MountError(f"--link-root: {path} must be an absolute path")
    if not path.is_dir():
        raise MountError(f"--link-root: {path} is not a directory")
    if warn and not os.statvfs(path).f_flag & os.ST_RDONLY:
        log.warning("--link-root %s is writable: files reached through the mount can be changed", path)


def check_link_root_view(path: Path, objects: Path) -> None:
    """Refuse (MountError) a link root that is not a view of the cache's ``objects`` folder: every
    epoch file would be a link to nothing (the cache folder itself instead of its ``objects/`` is an
    easy slip for ``EPOCHFS_LINK_ROOT``). A view is the folder itself or a bind mount of it (the
    same device and inode, read-only or not), or any path that shows the cache's marker folder
    (:data:`~epochfs.sidecar.store.objects.MARKER_PREFIX`: a random name made once per cache, so an
    empty cache passes and another cache's objects folder does not)."""
    with contextlib.suppress(OSError):
        if os.path.samefile(path, objects):
            return
    names = markers(objects)
    if any(os.path.isdir(path / name) for name in names):
        return
    shown = f"its marker {names[0]}" if names else "it"
    raise MountError(f"--link-root: {path} is not a view of the cache's objects folder {objects} "
                     f"({shown} is not there): pass the read-only path where {objects} itself is "
                     f"mounted (the epochs' files link into <link root>/ab/<sample id>)")


def wait_for_mount(
    path: Path, *, timeout: float = 10.0, alive: Callable[[], bool] | None = None
) -> bool:
    """Poll until a live FUSE mount answers at ``path``; False on timeout or once ``alive()`` is false."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entry = find_mount(path)
        if entry is not None and entry.fstype.startswith("fuse") and not is_dead(path):
            # The probe may have answered from the moment between a dead mount's detach and the
            # new mount: it counts only if a FUSE mount is (still) there afterwards.
            after = find_mount(path)
            if after is not None and after.fstype.startswith("fuse"):
                return True
        if alive is not None and not alive():
            return False
        time.sleep(0.02)
    return False


def unmount_stale(path: Path) -> int:
    """``epochfs unmount --mount DIR``: lazily unmount whatever epochfs left at DIR, then the
    read-only bind of the cache it served (exit status). A server killed with SIGKILL leaves both:
    the bind (``<cache>/objects-ro``) kept ``rm -rf`` of the cache from finishing ("Device or
    resource busy"). The cache is the one the view's mount table entry names (:func:`view_cache`);
    its bind goes unless another view of it reads through it, the server's own rule at its exit
    (:func:`release_link_root`)."""
    path = Path(os.path.abspath(path))
    entry = find_mount(path)
    if entry is None:
        print(f"epochfs unmount: nothing mounted at {path}")
        return 0
    if not entry.fstype.startswith("fuse"):
        print(f"epochfs unmount: {path} is a {entry.fstype} mount, not a FUSE view; left alone")
        return 1
    here = canonical(path)
    caches = {c for e in mount_table() if e.mount_point == here and (c := view_cache(e)) is not None}
    if not lazy_unmount(path):
        print(f"epochfs unmount: could not unmount {path}; is it in use by another namespace?")
        return 1
    print(f"epochfs unmount: unmounted {path} ({entry.fstype})")
    return 0 if all([_unbind(cache, path) for cache in sorted(caches)]) else 1


def _unbind(cache: Path, view: Path) -> bool:
    """Remove ``cache``'s read-only bind once ``view`` is gone, unless another view reads through
    it (said, and True); False when it could not be unmounted."""
    link_root = cache / DEFAULT_LINK_ROOT_NAME
    if find_mount(link_root) is None:
        return True  # none (a --link-root of the user's), or removed by the server at its exit
    release_link_root(cache, view)
    users = other_views(cache, view)
    if find_mount(link_root) is None:
        print(f"epochfs unmount: unmounted the read-only bind {link_root} (no other view of {cache})")
    elif users:
        print(f"epochfs unmount: left the read-only bind {link_root}: the view at {', '.join(users)} "
              "reads through it")
    else:
        print(f"epochfs unmount: could not unmount the read-only bind {link_root}")
        return False
    return True
