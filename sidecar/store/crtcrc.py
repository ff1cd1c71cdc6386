"""awscrt's hardware CRCs (CRC64NVME, CRC32C) without the start of awscrt's native module.

Why not ``from awscrt import checksums``: that import runs ``PyInit__awscrt``, which starts the
whole common runtime, aws-lc with it, and aws-lc seeds its CPU jitter entropy source there: ~55 ms
of CPU on this machine (``perf``: ``jent_*`` frames are 57% of the import), with the GIL held, a
cost aws-lc offers no run-time switch for. In the sampler that import fell on the first body's
hash, after the first object GET, and stalled every download thread behind it. A CRC needs none
of it.

The same shared library exports the functions the Python module's ``crc64nvme`` and ``crc32c``
are (``aws_py_checksums_crc64nvme(self, (data, previous))``): :func:`load` opens the library with
ctypes (``dlopen`` alone, a millisecond or two, runs no module init) and calls them as the module
would, GIL held on entry (``ctypes.PyDLL``); they release it themselves for buffers over 5 KiB,
so hashing still runs beside the other downloads' reads.

Those symbols are the extension's own, not an API: a release that changed their calling
convention would crash the process at the first call, which no check could catch. So the direct
call is made only for the awscrt releases it was checked on (:data:`TESTED`, the image's pin in
``docker/constraints.txt`` among them; read from the installed distribution's folder name, which
imports nothing), and each function is still checked against its catalogue check value (the CRC
of ``b"123456789"``) before use. Anything else (another release, no awscrt, no ctypes, a renamed
function, a wrong answer) makes :func:`load` answer None, and the caller imports
``awscrt.checksums`` instead.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger("epochfs.sidecar")

CHECK_INPUT = b"123456789"
CHECK_VALUES = {"crc64nvme": 0xAE8B14860A799888, "crc32c": 0xE3069283}
"""The CRC catalogue's check values (reveng.sourceforge.io): each function must give its own."""

TESTED = ((0, 38),)
"""The awscrt releases (major, minor) the direct call was checked on (``tests/store/test_crtcrc.py``
compares it with ``awscrt.checksums`` on the installed one, and fails on a release not listed)."""

Crc = Callable[[Any, int], int]


def load() -> dict[str, Crc] | None:
    """``{"crc64nvme": fn, "crc32c": fn}`` with ``fn(data, previous) -> crc`` straight from
    awscrt's shared library; None where that cannot be done or checked (then import awscrt)."""
    try:
        spec = importlib.util.find_spec("_awscrt")  # finds the file, loads nothing
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or spec.origin in ("built-in", "frozen"):
        return None
    if installed_release(Path(spec.origin).parent) not in TESTED:
        return None
    try:
        import ctypes

        library = ctypes.PyDLL(spec.origin)
        found = {name: _function(library, name) for name in CHECK_VALUES}
        for name, fn in found.items():
            if fn(CHECK_INPUT, 0) != CHECK_VALUES[name]:
                log.debug("awscrt's %s gave a wrong check value; importing awscrt", name)
                return None
    except (ImportError, OSError, AttributeError, TypeError, ValueError) as e:
        log.debug("awscrt's CRCs not loadable directly (%s); importing awscrt", e)
        return None
    return found


def installed_release(site: Path) -> tuple[int, int] | None:
    """(major, minor) of the awscrt distribution installed in ``site`` (its
    ``awscrt-<version>.dist-info`` folder); None when there is not exactly one."""
    found = [p.name for p in site.glob("awscrt-*.dist-info")]
    if len(found) != 1:
        return None
    parts = found[0].removeprefix("awscrt-").removesuffix(".dist-info").split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def _function(library: Any, name: str) -> Crc:
    import ctypes

    entry = getattr(library, f"aws_py_checksums_{name}")
    entry.restype = ctypes.py_object
    entry.argtypes = [ctypes.py_object, ctypes.py_object]

    def crc(data: Any, previous: int = 0) -> int:
        result: int = entry(None, (data, previous))
        return result

    crc.__name__ = name
    return crc


__all__ = ["CHECK_INPUT", "CHECK_VALUES", "TESTED", "Crc", "installed_release", "load"]
