"""Finding libfuse 3 before mfusepy binds it.

mfusepy loads whatever ``FUSE_LIBRARY_PATH`` names, else libfuse 2 when both are installed; so the
FUSE server sets that variable to an absolute path first. The soname of libfuse 3 is not fixed:
Debian bookworm ships ``libfuse3.so.3`` (fuse3 3.14), trixie ``libfuse3.so.4`` (fuse3 3.17), so
any ``libfuse3.so.<N>`` is accepted, the highest soname first. The absolute path matters too:
libfuse 3 may change the working directory.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
from collections.abc import Iterable, Sequence

from epochfs.fuse.errors import MountError

SONAME = re.compile(r"^libfuse3\.so\.(\d+)(?:\.\d+)*$")
SEARCH_GLOBS: tuple[str, ...] = (
    "/lib/*/libfuse3.so.*", "/usr/lib/*/libfuse3.so.*", "/usr/lib*/libfuse3.so.*",
    "/lib*/libfuse3.so.*", "/usr/local/lib*/libfuse3.so.*",
)
_ARCH_TAGS = {"x86_64": "x86-64", "aarch64": "AArch64"}


def _soname_major(path: str) -> int | None:
    m = SONAME.match(os.path.basename(path))
    return int(m[1]) if m else None


def _ldconfig_cache() -> str:
    try:
        return subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    except (FileNotFoundError, PermissionError):
        return ""


def from_ldconfig(listing: str, *, machine: str | None = None) -> list[str]:
    """libfuse 3 paths in an ``ldconfig -p`` listing, best first: this machine's architecture, then
    the highest soname (``libfuse3.so.4`` before ``libfuse3.so.3``)."""
    arch = _ARCH_TAGS.get(machine or os.uname().machine, "")
    ranked = []
    for line in listing.splitlines():
        name, sep, target = line.partition("=>")
        if not sep:
            continue
        soname = name.split()[0] if name.split() else ""
        path = target.strip()
        major = _soname_major(soname)
        if major is None or not os.path.isabs(path) or not os.path.exists(path):
            continue
        ranked.append((arch not in name, -major, path))
    return [path for *_, path in sorted(ranked)]


def from_globs(patterns: Iterable[str] = SEARCH_GLOBS) -> list[str]:
    """libfuse 3 files found by path patterns (no ldconfig, e.g. a minimal image), best first."""
    ranked = []
    for pattern in patterns:
        for hit in glob.glob(pattern):
            major = _soname_major(hit)
            if major is not None and os.path.exists(hit):
                ranked.append((-major, os.path.abspath(hit)))
    return [path for _, path in sorted(set(ranked))]


def find_libfuse3(
    *, environ: dict[str, str] | None = None, ldconfig: str | None = None,
    patterns: Sequence[str] = SEARCH_GLOBS,
) -> str:
    """Absolute path of the libfuse 3 to load: ``FUSE_LIBRARY_PATH`` if set (checked), else the best
    ``libfuse3.so.*`` known to the dynamic linker, else one found on disk. MountError if none."""
    env = os.environ if environ is None else environ
    given = env.get("FUSE_LIBRARY_PATH")
    if given:
        if not os.path.isabs(given) or not os.path.exists(given):
            raise MountError(f"FUSE_LIBRARY_PATH: {given!r} must be an absolute path to libfuse3.so.*")
        return given
    found = from_ldconfig(_ldconfig_cache() if ldconfig is None else ldconfig) or from_globs(patterns)
    if not found:
        raise MountError(
            "libfuse 3 not found: no libfuse3.so.* known to ldconfig or under /lib, /usr/lib "
            "(install fuse3 / libfuse3-3 or libfuse3-4, or set FUSE_LIBRARY_PATH)"
        )
    return found[0]
