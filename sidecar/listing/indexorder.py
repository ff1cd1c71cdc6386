"""The order of an ``epochfs index``'s records: shuffled, so every prefix is a uniform sample.

A sidecar reads its ``--index`` as one stream, from the first record, and fetches from what it has
read so far (docs/sampler.md: an epoch is a uniform sample of what is listed). An index in key
order would make epoch 0 the dataset's first folders, for as long as the stream took to reach the
others (a listing by pages spreads over the key space for the same reason: docs/sampler.md, "A
fair sample while the listing runs"). So ``epochfs index`` writes the records in the order of a
keyed hash of each key, a salt drawn for each index: whatever part of the stream a sidecar has
read is a uniform random sample of the whole, and its first epochs are as fair as a complete
listing's.

How, in bounded memory: the spans are listed in key order (file/folder clashes are found there,
as a listing finds them, and those files are left out: the folder wins, as in a listing); each
record goes to one of ``buckets`` temporary files by its hash (a uniform random subset each); each
bucket is then read whole, sorted by the hash and written out. Any prefix of the result is whole
buckets and a prefix of one, each a uniform random subset, so a uniform random sample. A bucket
holds about :data:`BUCKET_RECORDS` records (10-40 MB in memory while it is sorted).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import secrets
from collections.abc import Callable, Iterable
from typing import IO

from epochfs.sidecar.keys import SafeKey, check_key, is_directory_marker
from epochfs.sidecar.listing.clashes import ClashFinder

BUCKET_RECORDS = 65_536
"""Records a bucket holds about (each is read and sorted in memory)."""
MAX_BUCKETS = 512
"""Bucket files open at once at most (the common soft limit on open files is 1,024): past
33M keys the buckets grow instead (100M keys: ~195k records, a few tens of MB, each)."""


def record_key(line: bytes) -> str:
    """The key of a record line (a key that is not UTF-8 as its base64 form, which sorts apart
    from text keys: such keys cannot clash with a folder of text keys the view shows)."""
    doc = json.loads(line)
    return str(doc["k"]) if "k" in doc else "\x00kb:" + str(doc["kb"])


def _rank(salt: bytes, line: bytes) -> bytes:
    """The record's place, 16 hex digits: a keyed hash of the record line's key field (the salt
    keeps two indexes of one remote from sharing an order)."""
    return hashlib.blake2b(line.split(b',"s":', 1)[0], digest_size=8, key=salt).hexdigest().encode()


def clashes(parts: Iterable[str]) -> set[str]:
    """Keys of the sorted record files ``parts`` (read in order) that are also folders of later
    keys: left out of a shuffled index (a reader cannot find them in a stream out of key order).
    Fed to the finder as a listing's page filter feeds it (:class:`~.filter.PageFilter`): folder
    markers and keys the catalog refuses are passed over, and so are keys that are not UTF-8 (they
    sort by their bytes, apart from the text keys: fed, one stopped the finder for every key after
    it, since it takes a key out of order for an unsorted listing; a reader refuses them anyway)."""
    finder = ClashFinder()
    found: set[str] = set()
    for path in parts:
        with gzip.open(path, "rb") as f:
            for line in f:
                doc = json.loads(line)
                if "k" not in doc or is_directory_marker(doc["k"]):
                    continue  # not UTF-8 ("kb"): every reader refuses it anyway
                if isinstance(check_key(doc["k"]), SafeKey):  # a text key accepted is itself
                    found.update(finder.see(doc["k"], True))
    return found


def write_shuffled(parts: list[str], total: int, out: IO[bytes], pack: Callable[[bytes], bytes],
                   tmp: str, *, salt: bytes | None = None) -> tuple[int, int]:
    """Write the records of the sorted gzip files ``parts`` to ``out`` in shuffled order (see the
    module doc), each bucket's bytes through ``pack`` (gzip or not); returns (records written,
    clashes left out)."""
    salt = salt or secrets.token_bytes(16)
    dropped = clashes(parts)
    count = max(1, min(MAX_BUCKETS, -(-total // BUCKET_RECORDS)))
    paths = [os.path.join(tmp, f"bucket-{b:05d}") for b in range(count)]
    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(open(p, "wb")) for p in paths]
        for path in parts:
            with gzip.open(path, "rb") as f:
                for line in f:
                    rank = _rank(salt, line)  # hex: raw bytes could hold a newline
                    files[int(rank, 16) % count].write(rank + line)
    written = 0
    for path in paths:
        with open(path, "rb") as bucket:
            records = [(line[:16], line[16:]) for line in bucket]
        os.unlink(path)
        records.sort()
        kept = [line for _, line in records if not dropped or record_key(line) not in dropped]
        written += len(kept)
        out.write(pack(b"".join(kept)))
    return written, len(dropped)


__all__ = ["BUCKET_RECORDS", "clashes", "record_key", "write_shuffled"]
