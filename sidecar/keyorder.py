"""The sampling order of keys and the shards: pure functions of (seed, key) and (key, shard count).

The order is a keyed hash, not a shuffle of a list, so it needs no list in memory, is the same on
every node and every restart for the same seed, and is stable when keys are added: a new key takes
its place in the order without moving any other. Shards hash the key alone (no seed), so changing
the seed reshuffles the order inside a node's shard but never moves a key to another node.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

_ORDER_PERSON = b"epochfs-order"
_SHARD_PERSON = b"epochfs-shard"


@lru_cache(maxsize=64)
def _seed_key(seed: int) -> bytes:
    # blake2b keys are at most 64 bytes; any integer seed maps to a fixed 32-byte key.
    return hashlib.blake2b(str(int(seed)).encode("ascii"), digest_size=32, person=b"epochfs-seed").digest()


def rank(seed: int, key: str) -> int:
    """Position key of ``key`` in the sampling order of ``seed``: a signed 64-bit integer.

    Signed so that it fits SQLite's INTEGER; lower ranks are fetched first.
    """
    digest = hashlib.blake2b(
        key.encode("utf-8"), digest_size=8, key=_seed_key(seed), person=_ORDER_PERSON
    ).digest()
    return int.from_bytes(digest, "big", signed=True)


def shard_of(key: str, shard_count: int) -> int:
    """The shard (0 .. shard_count-1) that owns ``key``; independent of the seed."""
    if shard_count < 1:
        raise ValueError("shard_count must be at least 1")
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8, person=_SHARD_PERSON).digest()
    return int.from_bytes(digest, "big") % shard_count


def in_shard(key: str, shard_index: int, shard_count: int) -> bool:
    """True when this node (``shard_index`` of ``shard_count``) fetches ``key``."""
    if not 0 <= shard_index < shard_count:
        raise ValueError(f"shard_index {shard_index} must be in [0, {shard_count})")
    return shard_count == 1 or shard_of(key, shard_count) == shard_index


__all__ = ["in_shard", "rank", "shard_of"]
