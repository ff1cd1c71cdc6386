"""Where it writes buffered (a volume without ``O_DIRECT``, or ``Downloader(direct=False)``), the
downloader writes each block to the temp file in pieces of ``WRITE_PIECE`` bytes
(sidecar/tempwrite.py; direct writes: tests/remote/test_direct_writes.py).

One ``write`` of a whole 1 MiB block makes the kernel find and fill 256 page-cache pages in one
call; where free memory is cold (a VM's first touch of its pages) such a call stalls for
milliseconds while holding the file, and a set of 4 MiB objects took either its usual time or
far longer, run to run. Pieces of 32 KiB kept those times from being bimodal. The real
:class:`Downloader` fetches a real 4 MiB file through the ``file://`` remote into a real
:class:`Store`; every ``os.pwrite`` it makes is seen (and made) on its way to the kernel.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from store_helpers import sid_of

from epochfs.sidecar import download
from epochfs.sidecar.download import Downloader, RetryPolicy
from epochfs.sidecar.remote import open_remote
from epochfs.sidecar.store import Candidate, Store

SIZE = 4 << 20


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with contextlib.closing(Store(tmp_path / "cache", create=True)) as s:
        yield s


def test_a_4_mib_body_is_written_in_32_kib_pieces(store: Store, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    body = os.urandom(SIZE)
    (data_dir / "big.bin").write_bytes(body)
    remote = open_remote(f"file://{data_dir}")
    writes: list[int] = []
    real_write = os.pwrite

    def seen_write(fd: int, data: bytes | memoryview, offset: int) -> int:
        writes.append(len(data))
        return real_write(fd, data, offset)

    try:
        listed = {str(o.key): o for o in remote.list()}["big.bin"]
        dl = Downloader(store=store, remote=remote, stop=threading.Event(),
                        retry=RetryPolicy(attempts=1, base=0.0, cap=0.0), direct=False)
        monkeypatch.setattr(os, "pwrite", seen_write)
        result = dl.fetch(Candidate("big.bin", sid_of("big.bin"), listed.size, listed.version))
        monkeypatch.undo()
    finally:
        remote.close()
    assert result.error is None and result.admission is not None
    assert result.admission.temp.read_bytes() == body  # every piece landed, in order
    result.admission.temp.unlink()
    assert sum(writes) == SIZE
    assert max(writes) == 32 << 10 and len(writes) == SIZE // (32 << 10)
    assert download.WRITE_PIECE == 32 << 10
