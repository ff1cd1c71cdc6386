"""Giving the C heap's free pages back to the system after a big build (glibc ``malloc_trim``).

Why: building an epoch's tree or manifest streams the store in chunks of rows, so the server's heap
briefly holds far more than the result; glibc keeps that high-water mark as free memory of its
arenas (only the very top of the main heap goes back on its own), and without the trim the server's
RSS stays ~100 bytes per file above what it keeps. ``malloc_trim(0)`` returns every free page of
every arena (``MADV_DONTNEED``), once per build, which costs a walk of the heap: milliseconds.
Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import threading

log = logging.getLogger("epochfs.fuse")

_lock = threading.Lock()
_trim: object = None  # the bound malloc_trim, False where there is none, None before the first call


def _bind() -> object:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.malloc_trim
    except (OSError, AttributeError):
        log.debug("no malloc_trim here: free heap pages stay with the process")
        return False
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


def release_free_memory() -> bool:
    """Give the heap's free pages back to the system; False where the C library cannot."""
    global _trim
    with _lock:
        if _trim is None:
            _trim = _bind()
        fn = _trim
    if fn is False:
        return False
    fn(0)  # type: ignore[operator]
    return True
