"""Shared by the integrity tests: objects, the in-process sampler with extra flags, damaging a cached file."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import inprocess

from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.sampler import Sampler
from epochfs.sidecar.store import Store


def objects_of(count: int, size: int = 3000) -> dict[str, bytes]:
    return {f"train/{i:04d}.bin": hashlib.sha256(str(i).encode()).digest() * (size // 32)
            for i in range(count)}


@contextmanager
def sampling(cache: Path, remote: MemoryRemote, *extra: str) -> Iterator[tuple[Store, Sampler]]:
    """The sampler's loop on a thread over ``remote`` (tests/inprocess.py), with extra flags."""
    with inprocess.sampling(cache, remote, inprocess.settings_for(cache, *extra)) as (store, sampler):
        yield store, sampler


def damage(path: Path, how: str) -> None:
    """Flip one byte in the middle of a cached object, or cut it short (as a bad disk would)."""
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        if how == "flip":
            size = os.fstat(f.fileno()).st_size
            f.seek(size // 2)
            byte = f.read(1)
            f.seek(size // 2)
            f.write(bytes([byte[0] ^ 0x01]))
        else:
            f.truncate(os.fstat(f.fileno()).st_size - 1000)
    os.chmod(path, 0o444)
