"""awscrt's hardware CRCs (CRC64NVME, CRC32C) without the start of awscrt's native module.

Why not ``from awscrt import checksums``: that import runs ``PyInit__awscrt``, which starts the
whole common runtime, aws-lc with it, and aws-lc seeds its CPU jitter entropy source there: ~55 ms
of CPU on this machine (``perf``: ``jent_*`` frames are 57% of the import), with the GIL held, a
cost aws-lc offers no run-time switch for. In the sampler that import fell on the first body's
hash, after the first object GET, and stalled every download thread behind it. A CRC needs none
of it.

The same shared library exports the functions the Python module's ``crc64nvme`` and ``crc32c``
are (``aws_py_checksums_crc64nvme(self, (data, previous))``): :func:`load` opens the library with
ctypes (``dlopen`` alone, ~2 ms, runs no module init) and calls them as the module would, GIL
held on entry (``ctypes.PyDLL``); they release it themselves for buffers over 5 KiB, so hashing
still runs beside the other downloads' reads. Each is checked against its catalogue check value
(the CRC of ``b"123456789"``) before it is used; where anything differs (no awscrt, a release
that renamed or changed them, a wrong answer) :func:`load` answers None and the caller imports
``awscrt.checksums`` instead.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("epochfs.sidecar")

CHECK_INPUT = b"123456789"
CHECK_VALUES = {"crc64nvme": 0xAE8B14860A799888, "crc32c": 0xE3069283}
"""The CRC catalogue's check values (reveng.sourceforge.io): each function must give its own."""

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
    try:
        import ctypes

        library = ctypes.PyDLL(spec.origin)
        found = {name: _function(library, name) for name in CHECK_VALUES}
        for name, fn in found.items():
            if fn(CHECK_INPUT, 0) != CHECK_VALUES[name]:
                log.debug("awscrt's %s gave a wrong check value; importing awscrt", name)
                return None
    except (OSError, AttributeError, TypeError, ValueError) as e:
        log.debug("awscrt's CRCs not loadable directly (%s); importing awscrt", e)
        return None
    return found


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


__all__ = ["CHECK_INPUT", "CHECK_VALUES", "Crc", "load"]
