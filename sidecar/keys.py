"""Remote keys -> safe relative paths inside ``epoch-N/``, or the reason a key is skipped.

A remote is untrusted: S3 keys may hold ``..``, a leading ``/``, control characters or names too
long for a filesystem, and a local folder may hold names that are not UTF-8. Such keys must never
make the cache write outside its folder or break a listing, so they are refused here, before they
reach the catalog. Objects are stored under their sample id (never under the key), so the path is
only what the FUSE view shows; it is still kept strict so that ``epoch-N/<path>`` is always a plain,
valid, unambiguous relative path and the manifest (tab/newline separated) stays parseable.

Every refused key is skipped, never renamed: a renamed key could collide with another real key.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

MAX_COMPONENT_BYTES = 255
"""Longest file name most Linux filesystems accept (NAME_MAX)."""
MAX_PATH_BYTES = 4096
"""Longest path the kernel accepts (PATH_MAX), counted for the relative path alone."""
MAX_COMPONENTS = 128
"""Most components (folders and the file) a key's path may have. Within 4,096 bytes a key may nest
some 2,000 folders (``d/d/.../x``), and the work on a key's folders grows with its depth: the
FUSE view and the class folders (``store/classes.py``) hold every folder above every sample by
its full path, some 4 MB for one such key. No dataset nests files 128 folders deep (deep layouts
such as ``train/<class>/<video>/<clip>/<frame>`` have a handful), so only a hostile or broken
remote meets the bound. The check is one count of the key's ``/``."""
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
"""C0 and C1 control characters and the Unicode line and paragraph separators: one regex search
a key (a Python loop over its characters cost ~10 µs a key, most of a listed page's CPU)."""
_ODD_COMPONENT = re.compile(r"(?:^|/)(?:\.\.?)?(?:/|$)")
"""An empty, ``.`` or ``..`` component anywhere in a key."""


@dataclass(frozen=True)
class SafeKey:
    """A key accepted for the catalog (also its path inside ``epoch-N/``) and its sample id."""

    key: str
    sid: str


@dataclass(frozen=True)
class Skip:
    """A key refused, with a short reason for the log (``reason`` is a stable category)."""

    key: str
    reason: str


def sample_id(key: str) -> str:
    """The sample id of a key: hex of a 16-byte blake2b of its UTF-8 bytes (names the object file)."""
    return hashlib.blake2b(key.encode("utf-8"), digest_size=16).hexdigest()


def is_directory_marker(key: str | bytes) -> bool:
    """Keys ending in ``/`` are folder placeholders (S3 consoles make them), not samples."""
    return key.endswith(b"/") if isinstance(key, bytes) else key.endswith("/")


def check_key(key: str | bytes) -> SafeKey | Skip:
    """Map one remote key (relative to the remote root) to a :class:`SafeKey` or a :class:`Skip`.

    ``key`` may be ``bytes`` (raw names from a local folder) or ``str``; a ``str`` holding lone
    surrogates (how Python decodes undecodable file names) counts as non-UTF-8.
    """
    if isinstance(key, bytes):
        try:
            text = key.decode("utf-8")
        except UnicodeDecodeError:
            return Skip(key.decode("utf-8", "backslashreplace"), "not UTF-8")
    else:
        text = key
    try:
        raw = text.encode("utf-8")
    except UnicodeEncodeError:
        return Skip(text.encode("utf-8", "backslashreplace").decode("ascii"), "not UTF-8")
    reason = _reason(text, raw)
    if reason is not None:
        return Skip(text, reason)
    return SafeKey(key=text, sid=sample_id(text))


def _reason(text: str, raw: bytes) -> str | None:
    if not text:
        return "empty key"
    if "\x00" in text:
        return "NUL byte"
    if _CONTROL.search(text):
        return "control character"
    if "\\" in text:
        return "backslash"
    if text.startswith("/"):
        return "leading /"
    if len(raw) > MAX_PATH_BYTES:
        return f"path over {MAX_PATH_BYTES} bytes"
    if text.count("/") >= MAX_COMPONENTS:
        return f"path over {MAX_COMPONENTS} components"
    if _ODD_COMPONENT.search(text) is None and len(raw) <= MAX_COMPONENT_BYTES:
        return None  # the common key: no part of it can be refused below
    for part in text.split("/"):
        if part == "":
            return "empty component (//)"
        if part in (".", ".."):
            return f"{part!r} component"
        if len(part.encode("utf-8")) > MAX_COMPONENT_BYTES:
            return f"component over {MAX_COMPONENT_BYTES} bytes"
    return None


__all__ = [
    "MAX_COMPONENTS",
    "MAX_COMPONENT_BYTES",
    "MAX_PATH_BYTES",
    "SafeKey",
    "Skip",
    "check_key",
    "is_directory_marker",
    "sample_id",
]
