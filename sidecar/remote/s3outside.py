"""Keys a ``ListObjectsV2`` page answers outside the prefix it was asked for: passed over, said.

S3 answers only keys that start with the ``Prefix`` asked; a store that does not honour it (a
broken or hostile endpoint) may answer any. The remote cuts its root (``prefix/``) off every key
to make it relative, and a key outside the root, cut the same way, would become another key of the
dataset (``other/secret.bin`` under ``pre/`` read as ``r/secret.bin``, later fetched as
``pre/r/secret.bin``: another object than the one listed). Such keys and folders are left out of
the page, with one WARNING a page that says how many and names the first.
"""

from __future__ import annotations

import logging

log = logging.getLogger("epochfs.remote")


def within_root(root: str, keys: list[str], prefixes: list[str], url: str) -> list[str]:
    """``prefixes`` that start with ``root``; the keys and folders that do not are counted and
    logged (the caller leaves the keys out too)."""
    outside = [k for k in keys if not k.startswith(root)]
    inside = [p for p in prefixes if p.startswith(root)]
    outside += [p for p in prefixes if not p.startswith(root)]
    if outside:
        log.warning("listing %s: the store answered %d key(s) or folder(s) outside the prefix %r (the "
                    "first: %r): passed over; does the endpoint honour ListObjectsV2's Prefix?",
                    url, len(outside), root, outside[0])
    return inside


__all__ = ["within_root"]
