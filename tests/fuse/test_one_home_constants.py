"""Values both FUSE APIs, the settings and the view share come from one definition each.

* The write calls: both adapters answer EROFS for the same calls, from the operations' one list
  (the low-level API names four of them as one ``setattr``). ``fallocate`` is among them, so the
  high-level operations refuse it as a read-only mount, not as an unimplemented call (ENOSYS).
* The view's refresh interval: the operations' default, ``--retire-grace``'s least value (twice
  it) and the words of its help and refusal all come from ``layout.VIEW_REFRESH_SECONDS``.
"""

from __future__ import annotations

import dataclasses
import errno
import inspect
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fuse_helpers import open_store

from epochfs.fuse.libfuse import find_libfuse3
from epochfs.fuse.view import View
from epochfs.sidecar import config
from epochfs.sidecar.store import Store
from epochfs.torchclient.layout import VIEW_REFRESH_SECONDS

os.environ.setdefault("FUSE_LIBRARY_PATH", find_libfuse3())
# mfusepy binds libfuse when imported: choose libfuse 3 first.
from epochfs.fuse import lowlevel, operations

LINK_ROOT = Path("/cache/objects-ro")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(tmp_path / "cache", min_samples=1)
    yield s
    s.close()


def test_fallocate_is_refused_as_a_write(store: Store) -> None:
    ops = operations.EpochOperations(view=View(store=store, link_root=LINK_ROOT), timeout=10)
    with pytest.raises(OSError) as e:
        ops.fallocate("/epoch-0/x", 0, 0, 4096, 0)
    assert e.value.errno == errno.EROFS


def test_the_low_level_write_calls_are_the_operations() -> None:
    high = set(operations.WRITE_CALLS)
    assert set(operations.SETATTR_CALLS) <= high
    assert set(lowlevel.WRITE_CALLS) == {"setattr"} | (high - set(operations.SETATTR_CALLS))


def test_the_refresh_interval_has_one_home() -> None:
    default = inspect.signature(operations.EpochOperations).parameters["refresh_interval"].default
    assert default == VIEW_REFRESH_SECONDS
    assert config.MIN_RETIRE_GRACE == 2 * VIEW_REFRESH_SECONDS
    every = f"every {VIEW_REFRESH_SECONDS:g} s"
    grace = next(f for f in dataclasses.fields(config.SamplerSettings) if f.name == "retire_grace")
    assert every in grace.metadata["doc"]
    with pytest.raises(ValueError, match=every):
        config._retire_grace(str(VIEW_REFRESH_SECONDS))
