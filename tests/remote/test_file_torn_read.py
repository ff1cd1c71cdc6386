"""A ``file://`` object written while the sampler reads it is never admitted torn (review r55).

A 20 MB file read at 4 MiB/s, overwritten in place with other bytes of the same size 3 s in, was
admitted as neither version: 3,072 blocks of the old bytes and 1,811 of the new, under the
listing's old ``mtime`` (so nothing marked it stale, and ``epochfs verify`` vouched for the digest
of the torn bytes). The reader now compares the file's stat at its open with the stat at the
body's end and fails the read (a transient failure, tried again) when they differ; the version it
records is the open's.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from common import wait_until
from sampler_helpers import index_rows, running_sampler

from epochfs.sidecar.remote.base import Transient
from epochfs.sidecar.remote.file import FileRemote


def test_a_file_written_during_its_read_fails_the_read(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    path = data / "big.bin"
    path.write_bytes(b"a" * 300_000)
    reader = FileRemote(url=data.as_uri()).open("big.bin")
    assert reader.etag == f"mtime:{path.stat().st_mtime_ns}" and not reader.etag_is_md5
    buf = memoryview(bytearray(100_000))
    assert reader.readinto(buf) == 100_000
    with open(path, "r+b") as f:  # in place, same size: only the times tell
        f.write(b"b" * 300_000)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000))  # a coarse clock
    assert reader.readinto(buf) == 100_000
    with pytest.raises(Transient, match="changed while it was read"):
        reader.readinto(buf)
    reader.close()
    # Read again whole, it is one version.
    again = FileRemote(url=data.as_uri()).open("big.bin")
    assert sum(again.readinto(buf) for _ in range(4)) == 300_000
    again.close()


@pytest.mark.long
def test_the_sampler_caches_one_version_of_a_file_rewritten_while_read(tmp_path: Path) -> None:
    data, cache = tmp_path / "data", tmp_path / "cache"
    data.mkdir()
    path = data / "big.bin"
    old, new = os.urandom(8 << 20), os.urandom(8 << 20)
    path.write_bytes(old)
    with running_sampler(cache, data.as_uri(), "--max-rate", "2Mi", "--scrub-rate", "0"):
        # The body is on its way (a temp file has grown), then the file is rewritten in place.
        def reading() -> bool:
            temps = list((cache / "tmp").glob("*.part"))
            return any(0 < t.stat().st_size < len(old) for t in temps if t.exists())

        wait_until(reading, timeout=60, what="the download under way")
        with open(path, "r+b") as f:
            f.write(new)
        wait_until(lambda: index_rows(cache, "SELECT COUNT(*) FROM samples")[0][0] == 1, timeout=60,
                   what="the sample admitted")
    (sid, version), = index_rows(cache, "SELECT sid, version FROM samples")
    body = (cache / "objects" / sid[:2] / sid).read_bytes()
    assert body == new, "the cached bytes are the file's one version, the new one"
    assert version == f"mtime:{path.stat().st_mtime_ns}"
