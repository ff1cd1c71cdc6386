"""The records of listings read from files (an ``epochfs index``, an S3 Inventory's data files):
one record read into the object it names, or refused with why, and the count and log lines of
those refused.

Apart from :mod:`.indexfile` and :mod:`.inventory` because both read records this way and each
skips, counts and names a record it cannot read rather than fail the listing.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from typing import Any

from epochfs.sidecar.listing.filter import LOG_LIMIT
from epochfs.sidecar.remote import RemoteObject

log = logging.getLogger("epochfs.catalog")

MAX_SIZE = 2**63 - 1
"""The largest size a record may give: the catalog keeps sizes as SQLite's 64-bit integers."""


class BadRecord(ValueError):
    """A record of an index that cannot be read (its message says why)."""


def json_object(line: bytes) -> dict[str, Any] | BadRecord:
    """A record's line as a JSON object, or why it is not one."""
    try:
        record = json.loads(line)
    except ValueError as e:  # UnicodeDecodeError too
        return BadRecord(f"not JSON ({e})")
    return record if isinstance(record, dict) else BadRecord("not a JSON object")


def read_record(record: dict[str, Any] | BadRecord) -> RemoteObject:
    """The object a record of an index names: ``k`` (a string) or ``kb`` (base64 of the key's
    bytes), ``s`` (required: a whole number of bytes, the size a fetch checks the object
    against), ``v`` (a string, optional). Else :class:`BadRecord`, saying why (``record`` is
    one already when its line is no JSON object)."""
    if isinstance(record, BadRecord):
        raise record
    key: str | bytes
    if "k" in record:
        if not isinstance(record["k"], str):
            raise BadRecord('"k" is not a string')
        key = record["k"]
    elif "kb" in record:
        try:
            key = base64.b64decode(record["kb"], validate=True)
        except (TypeError, ValueError):  # binascii.Error is a ValueError
            raise BadRecord('"kb" is not base64') from None
    else:
        raise BadRecord('no key ("k" or "kb")')
    if "s" not in record:
        raise BadRecord('no size ("s")')
    size = record["s"]
    if type(size) is not int or not 0 <= size <= MAX_SIZE:  # bool is an int: not a size
        raise BadRecord(f'"s" is not a whole number of bytes: {size!r}')
    version = record.get("v", "")
    if not isinstance(version, str):
        raise BadRecord(f'"v" is not a string: {version!r}')
    return RemoteObject(key, size, version)


class Unreadable:
    """The records of a source read from files (an index, an S3 Inventory's data files) that
    cannot be read: each is skipped and counted, and the first ``LOG_LIMIT`` of the source are
    logged with where they are and why, then only counted. Skipped, not fatal: a failed listing
    would not end (the listing beside the sampler tries it again for ever, reading the file
    again each time) and would hold back every good record after the bad one. Thread-safe: an
    inventory's data files are read at once."""

    def __init__(self, name: str) -> None:
        self.name = name  # the source, as the log names it
        self._lock = threading.Lock()
        self.count = 0
        """Records skipped by this source's reads so far."""

    def skip(self, where: str, why: str) -> None:
        with self._lock:
            self.count += 1
            n = self.count
        if n <= LOG_LIMIT:
            log.warning("%s: %s; the record is skipped (counted; the listing goes on)", where, why)
        elif n == LOG_LIMIT + 1:
            log.warning("%s: more unreadable records: only their count is reported from now on",
                        self.name)

    @staticmethod
    def report(what: str, skipped: int, first: str) -> None:
        """The count of one file's records skipped, once it is read to its end."""
        log.warning("%s: %d unreadable record(s) skipped (first: %s)", what, skipped, first)


__all__ = ["MAX_SIZE", "BadRecord", "Unreadable", "json_object", "read_record"]
