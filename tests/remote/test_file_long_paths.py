"""A ``file://`` remote walks and reads relative to folder descriptors, so the length of the root's
own path never limits its keys, and a key replaced by a fifo never blocks its reader.

Keys may be up to 4,096 bytes (``epochfs.sidecar.keys``). Joined to the root's absolute path, one
such key passes the kernel's limit on one path (PATH_MAX, 4,096 bytes with its NUL): a folder
walked by its absolute path failed the whole listing with ENAMETOOLONG, for ever, and a file under
it could not be stat'ed or opened. A folder whose own relative path passes 4,096 bytes is not
walked: it is listed as one key of that path, which the catalog's key check refuses as ``path over
4096 bytes``. A fifo in a key's place (after the listing) is refused at the open without blocking.

Real folders made with ``mkdirat`` (their absolute paths are too long for ``mkdir``), a real fifo.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from file_chain import make_chain, remove_tree

from epochfs.sidecar.keys import MAX_PATH_BYTES, Skip, check_key
from epochfs.sidecar.remote.base import Changed
from epochfs.sidecar.remote.file import DEEPEST, FileRemote


def long_root(tmp_path: Path) -> Path:
    """A root of some 300 bytes: under it a key of 4,000 bytes is a path over PATH_MAX."""
    root = tmp_path / ("r" * 200) / "ds"
    root.mkdir(parents=True)
    return root


def test_the_walk_stops_where_the_catalogs_key_limit_is() -> None:
    assert DEEPEST == MAX_PATH_BYTES


@pytest.mark.parametrize("length", [4090, 4096])
def test_a_key_longer_than_path_max_under_the_root_is_listed_and_read(tmp_path: Path, length: int) -> None:
    root = long_root(tmp_path)
    folders = [bytes([ord("a") + i]) * 250 for i in range(16)]  # 16 x 251 = 4,016 bytes
    body = os.urandom(70_000)
    key = make_chain(root, folders, b"f" * (length - 16 * 251), body)
    assert len(key) == length and len(os.fsencode(root)) + 1 + length > 4096
    (root / "good.bin").write_bytes(b"good")

    remote = FileRemote(url=root.as_uri())
    listed = {o.key: o.size for o in remote.list()}
    assert listed == {key: len(body), "good.bin": 4}
    assert not isinstance(check_key(key), Skip), "a key the catalog takes"
    reader = remote.open(key)
    got = bytearray()
    buf = memoryview(bytearray(1 << 16))
    while n := reader.readinto(buf):
        got += buf[:n]
    reader.close()
    assert bytes(got) == body
    assert remote.object_size(key) == len(body)
    assert remote.read_range(key, 1000, 10) == body[1000:1010]


def test_a_folder_past_the_limit_is_one_key_the_catalog_refuses(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    (root / "good").mkdir(parents=True)
    (root / "good" / "a.bin").write_bytes(b"hello")
    make_chain(root, [b"D" * 250] * 17, b"x.bin", b"x")  # 17 x 251 bytes: past 4,096
    (root / "z.bin").write_bytes(b"z")

    keys = [o.key for o in FileRemote(url=root.as_uri()).list()]

    deep = "/".join(["D" * 250] * 17)  # the first folder past the limit, not walked
    assert keys == [deep, "good/a.bin", "z.bin"]
    refused = check_key(deep)
    assert isinstance(refused, Skip) and refused.reason == f"path over {MAX_PATH_BYTES} bytes"


def test_a_chain_of_a_thousand_and_more_folders_is_walked(tmp_path: Path) -> None:
    """A chain of 1,500 folders ``d/d/...`` (a key of 3,004 bytes) is listed with the rest of the
    dataset: past ~990 levels the walk failed on Python's recursion limit, and the whole listing
    with it."""
    root = tmp_path / "ds"
    (root / "top").mkdir(parents=True)
    (root / "top" / "f").write_bytes(b"t")
    deep = make_chain(root, [b"d"] * 1500, b"leaf", b"x")

    try:
        keys = [o.key for o in FileRemote(url=root.as_uri()).list()]
    finally:
        remove_tree(root)

    assert keys == [deep, "top/f"]
    assert len(deep) == 3004


@pytest.mark.parametrize("last", [78, 79, 80])
def test_a_folder_at_the_limit_is_walked_and_its_files_listed(tmp_path: Path, last: int) -> None:
    """A folder of 4,094 to 4,096 bytes is walked (its path, ``/`` and all, is one byte past the
    kernel's limit on one path at 4,095): its files are keys over 4,096 bytes, listed for the
    catalog to skip and count."""
    root = tmp_path / "ds"
    root.mkdir()
    folders = [b"D" * 250] * 16 + [b"E" * last]
    key = make_chain(root, folders, b"x.bin", b"x")
    assert len(key) == 16 * 251 + last + 6

    assert [o.key for o in FileRemote(url=root.as_uri()).list()] == [key]


@pytest.fixture
def fifos() -> Iterator[list[Path]]:
    """Fifos a test makes; any reader left blocked on one is let go at the end (a test of a
    blocking open must fail, not hang)."""
    made: list[Path] = []
    yield made
    for path in made:
        with contextlib.suppress(OSError):  # no reader waits (ENXIO), or gone
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def raised_within(call: Callable[[], object], seconds: float) -> BaseException | None:
    """What ``call`` raised (None: it returned), failing the test if it is still running after
    ``seconds`` (on a thread, left blocked for the fixture to let go)."""
    raised: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            call()
        except BaseException as e:
            raised.append(e)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    assert done.wait(seconds), "blocked on the fifo"
    return raised[0] if raised else None


def test_a_fifo_in_a_keys_place_is_refused_at_once(tmp_path: Path, fifos: list[Path]) -> None:
    (tmp_path / "k.bin").write_bytes(b"listed")
    remote = FileRemote(url=tmp_path.as_uri())
    assert [o.key for o in remote.list()] == ["k.bin"]
    (tmp_path / "k.bin").unlink()
    os.mkfifo(tmp_path / "k.bin")  # after the listing
    fifos.append(tmp_path / "k.bin")

    for call in (lambda: remote.open("k.bin"), lambda: remote.read_range("k.bin", 0, 4)):
        error = raised_within(call, 10)
        assert isinstance(error, Changed), error
        assert "k.bin: a fifo now, not a regular file" in str(error)
    assert remote.object_size("k.bin") == 0  # a stat: answered without opening it for reading
