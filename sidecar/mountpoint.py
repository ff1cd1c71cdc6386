"""Mount-point checks and lazy unmounts for the supervisor.

The supervisor must tell apart a usable mount point, a dead FUSE mount left by a crashed server
("Transport endpoint is not connected", which it cleans), and a live mount of something else (which
it refuses). It reads ``/proc/self/mountinfo`` rather than trusting ``os.path.ismount``, because a
``stat`` of a dead FUSE mount fails and a hung one may block; stats of the mount point run in a
helper thread with a deadline (:func:`probe`).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from epochfs.sidecar.config import ConfigError


@dataclass(frozen=True)
class MountEntry:
    """One line of /proc/self/mountinfo that matters here."""

    mount_point: str
    fstype: str
    source: str


def _unescape(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo octal.
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 4 <= len(field) and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def mounts_at(path: Path) -> list[MountEntry]:
    """Every mount stacked on ``path`` (normally zero or one), from /proc/self/mountinfo."""
    # Resolve the parent only: resolving the mount point itself would stat a possibly dead mount.
    target = os.path.join(os.path.realpath(Path(path).absolute().parent), Path(path).name)
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            parts, rparts = left.split(), right.split()
            if len(parts) < 5 or len(rparts) < 2:
                continue
            mp = _unescape(parts[4])
            if mp == target:
                found.append(MountEntry(mp, rparts[0], _unescape(rparts[1])))
    return found


def _is_dead(path: Path) -> bool:
    try:
        os.stat(path)
    except OSError as e:
        return e.errno == errno.ENOTCONN
    return False


def is_fuse(entry: MountEntry) -> bool:
    return entry.fstype == "fuse" or entry.fstype.startswith("fuse.")


def probe(path: Path, *, timeout: float) -> str:
    """Stat ``path`` within ``timeout`` seconds: "ok", "dead" (ENOTCONN), "hung" or "error: ...".

    A stuck stat of a hung FUSE server would block the caller; the helper thread is a daemon and is
    simply left behind if it never returns.
    """
    result: list[str] = []

    def run() -> None:
        try:
            os.stat(path)
            os.listdir(path)
            result.append("ok")
        except OSError as e:
            result.append("dead" if e.errno == errno.ENOTCONN else f"error: {e.strerror}")

    t = threading.Thread(target=run, name="epochfs-probe", daemon=True)
    t.start()
    t.join(timeout)
    return result[0] if result else "hung"


def lazy_unmount(path: Path) -> None:
    """Detach whatever is mounted on ``path`` now and let it go when no longer busy (MNT_DETACH)."""
    for _ in range(8):  # stacked mounts come off one per call
        if not mounts_at(path):
            return
        fusermount = shutil.which("fusermount3") or shutil.which("fusermount")
        cmd = [fusermount, "-u", "-z", str(path)] if fusermount else ["umount", "-l", str(path)]
        rc = subprocess.run(cmd, capture_output=True, timeout=10).returncode
        if rc != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=10)
    if mounts_at(path):
        raise OSError(f"could not unmount {path}")


def check_mount_point(path: Path) -> bool:
    """Validate the mount point before starting; returns True when a dead mount was cleaned.

    Missing, not a folder, mounted by something alive, or not empty: :class:`ConfigError` (exit 2).
    """
    if _is_dead(path):
        lazy_unmount(path)
        cleaned = True
    else:
        cleaned = False
    if not path.exists():
        raise ConfigError(f"--mount: {path} does not exist (create an empty directory)")
    if not path.is_dir():
        raise ConfigError(f"--mount: {path} is not a directory")
    present = mounts_at(path)
    if present:
        what = ", ".join(f"{m.fstype} from {m.source}" for m in present)
        raise ConfigError(f"--mount: {path} is already mounted ({what}); unmount it first "
                          f"(epochfs unmount --mount {path})")
    if any(os.scandir(path)):
        raise ConfigError(f"--mount: {path} is not empty")
    return cleaned
