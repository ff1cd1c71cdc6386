"""Resume points of the sources read as one stream (:class:`~.sources.SerialSource`,
:class:`~.indexfile.IndexSource`): where a listing killed mid-way goes on.

A stream read again after a restart is not the stream read before it: files were added and
deleted meanwhile, an index was written again at its URL. So a resume point never says "skip the
first n" (skipping by count, a ``file://`` listing that lost 100 files before its resume point
dropped 100 existing files past it as gone, and kept the 100 deleted; an index rewritten in
another order resumed at its old line count, keys missing, the listing called complete):

- a stream in a known order (a sorted listing: keys in byte order; a ``file://`` walk: folder by
  folder, each folder's names sorted) resumes after its last committed key, as a paged source
  does (S3's ``StartAfter``): ``key:<key>``, ``keyb:<base64>`` for a key that is not UTF-8;
- any other stream (an index file's lines, an ``http(s)://`` key list) resumes after its first n
  items only when they are the very items committed: ``<n>:<digest of them>``. When they are not,
  the stream changed under the listing: :func:`changed` names the source anew and fails the run,
  so the run tried again lists it afresh (a new generation, whose end drops what it did not see).

A resume point in none of these forms (a count, written by an earlier version) is read from the
stream's start: nothing committed is trusted to mean the same keys now.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Callable
from typing import Protocol

from epochfs.sidecar.remote import RemoteError, RemoteObject

KEY = "key:"
KEY_BYTES = "keyb:"
AGAIN = re.compile(r" \(read again: ([0-9a-f]+)\)")
"""The mark :func:`changed` puts on a source's name (so a recorded name is read back whole)."""

Order = Callable[[bytes], tuple[bytes, ...]]


def key_bytes(key: str | bytes) -> bytes:
    """A key as the bytes it is compared by (a ``str`` key as UTF-8)."""
    return key if isinstance(key, bytes) else key.encode("utf-8", "surrogateescape")


def key_point(key: str | bytes) -> str:
    """The resume point after ``key``."""
    if isinstance(key, bytes):
        return KEY_BYTES + base64.b64encode(key).decode("ascii")
    return KEY + key


def point_key(after: str) -> bytes | None:
    """The key a resume point is after (as bytes); None when it names none (``""``: the start;
    another form: an earlier version's count, read from the start)."""
    if after.startswith(KEY):
        return key_bytes(after[len(KEY):])
    if after.startswith(KEY_BYTES):
        try:
            return base64.b64decode(after[len(KEY_BYTES):], validate=True)
        except binascii.Error:
            return None
    return None


class Prefix:
    """The items of a stream read so far: their number and a digest of them (each item's bytes
    length-prefixed, so that two streams cut differently into items never digest alike; a line
    as it is, its end of line delimiting it)."""

    def __init__(self) -> None:
        self.count = 0
        self._hash = hashlib.blake2b(digest_size=16)

    def add(self, item: bytes) -> None:
        self.count += 1
        self._hash.update(len(item).to_bytes(8, "little"))
        self._hash.update(item)

    def add_lines(self, lines: list[bytes]) -> None:
        """Lines read with their ends of line (delimited already: digested as they are, at once,
        the cheaper for an index of millions of lines)."""
        self.count += len(lines)
        self._hash.update(b"".join(lines))

    @property
    def digest(self) -> str:
        return self._hash.hexdigest()

    def point(self) -> str:
        """The resume point after the items read so far."""
        return f"{self.count}:{self.digest}"


def counted_point(after: str) -> tuple[int, str] | None:
    """``(n, digest)`` of a counted resume point, ``(0, "")`` for the start; None for any other
    form (an earlier version's bare count: read from the start)."""
    if not after:
        return 0, ""
    count, sep, digest = after.partition(":")
    if not sep or not count.isdigit() or not re.fullmatch(r"[0-9a-f]+", digest):
        return None
    return int(count), digest


def object_item(obj: RemoteObject) -> bytes:
    """What a listed object is digested as: its key, size and version (one of them changed is
    another listing of it)."""
    return b"\0".join((key_bytes(obj.key), str(obj.size).encode(), str(obj.version).encode()))


def base_name(name: str) -> str:
    """A source's name without the mark :func:`changed` put on it."""
    return AGAIN.sub("", name)


class Named(Protocol):
    name: str


def changed(source: Named, what: str, read: Prefix, expected: int) -> RemoteError:
    """The failure of a resume whose first ``expected`` items were not those committed (``read``:
    the ones read now, fewer when the stream ended before): ``source``'s name is marked anew, so
    the run tried again starts another listing, read from the start, instead of resuming this
    one (whose committed rows are of another stream). The mark is a digest of the name it
    replaces with what was read, so it is never that name again (the same stream read twice
    after two changes, or two streams that ended alike, would resume for ever)."""
    mark = hashlib.blake2b(f"{source.name}\0{read.count}:{read.digest}".encode(), digest_size=6)
    source.name = f"{base_name(source.name)} (read again: {mark.hexdigest()})"
    return RemoteError(f"{what} changed since this listing began (its first {expected} entries are "
                       f"not those listed, {read.count} read): listing it afresh")


__all__ = ["AGAIN", "Prefix", "base_name", "changed", "counted_point", "key_bytes", "key_point",
           "object_item", "point_key"]
