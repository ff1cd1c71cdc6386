"""The sampler's loop in-process over an in-memory remote, and small real filesystems for it: what
the in-process tests of several areas share (sampler logic, disk space, integrity, the soak)."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from epochfs.sidecar import config
from epochfs.sidecar.catalog import build_catalog
from epochfs.sidecar.config import SamplerSettings
from epochfs.sidecar.remote.testing import MemoryRemote
from epochfs.sidecar.sampler import Sampler
from epochfs.sidecar.sampler.breaker import OutageBreaker
from epochfs.sidecar.store import Store


def objects_of(count: int, size: int = 1024) -> dict[str, bytes]:
    return {f"train/{i:04d}.bin": bytes([i % 251]) * size for i in range(count)}


def settings_for(cache: Path, *extra: str) -> SamplerSettings:
    # The listing on threads: these tests hand the command an in-memory remote a child cannot see.
    return config.parse(SamplerSettings, ["--cache", str(cache), "--remote", "file:///unused",
                                          "--list-process", "0", "--capacity", "1Mi",
                                          "--concurrency", "4", *extra], environ={})


def start_recording(target: Callable[[], object], name: str = "sampler-under-test"
                    ) -> tuple[threading.Thread, list[BaseException]]:
    """``target`` on a started thread, and the list that receives whatever it raised (a test
    asserts it empty, or on what ended the loop)."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target()
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread, errors


@contextmanager
def sampling(cache: Path, remote: MemoryRemote, settings: SamplerSettings,
             breaker: OutageBreaker | None = None,
             after_listing: Callable[[], None] | None = None) -> Iterator[tuple[Store, Sampler]]:
    """The sampler's loop on a thread, as ``epochfs sample`` runs it after listing
    (``after_listing`` changes the remote between the two)."""
    store = Store(cache, create=True)
    store.configure(settings.policy())
    build_catalog(store, remote, seed=settings.seed, shard_index=0, shard_count=1,
                  object_limit=settings.object_limit)
    if after_listing is not None:
        after_listing()
    stop = threading.Event()
    sampler = Sampler(store=store, remote=remote, settings=settings, stop=stop, breaker=breaker)
    thread, errors = start_recording(sampler.run)
    try:
        yield store, sampler
    finally:
        stop.set()
        thread.join(timeout=30)
        store.close()
    assert not thread.is_alive() and not errors, errors


@contextlib.contextmanager
def small_volume(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(volume: Path, *, leave: int) -> Path:
    """A filler file that leaves about ``leave`` bytes free (less if the sampler writes meanwhile);
    called again, it tops the same file up."""
    filler = volume / "filler"
    with open(filler, "ab") as f:
        while True:
            st = os.statvfs(volume)
            free = st.f_bavail * st.f_frsize
            if free <= leave:
                break
            try:
                f.write(b"\0" * min(1 << 20, free - leave))
                f.flush()
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                break
    return filler
