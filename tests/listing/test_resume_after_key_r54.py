"""A resumed ``file://`` listing goes on after the last key it committed, not after a count (r54).

A sampler killed mid-relist of 20,000 files, then f00000-f00099 deleted (before its resume
point), resumed by skipping as many objects as it had committed: the walk's next 3,000 were now
f00100-f03099, so f03000-f03099, which exist, were never listed and dropped as gone, and status
said complete. A real :class:`~epochfs.sidecar.listing.Lister` lists a real folder into a real
:class:`~epochfs.sidecar.store.Store`; a run stopped after some pages leaves what a killed one
does (its committed pages and resume point), and a new lister over a new source resumes it, as a
sampler started again does. A walk in no promised order (an ``http(s)://`` key list, served by a
real ``http.server``) resumes only past the very keys it committed, else is listed afresh.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from epochfs.sidecar.listing.filter import CatalogReport
from epochfs.sidecar.listing.lister import Lister
from epochfs.sidecar.listing.sources import SerialSource
from epochfs.sidecar.remote import RemoteError, open_remote
from epochfs.sidecar.remote.file import FileRemote
from epochfs.sidecar.store import Store

PAGE = 100


def _lister(store: Store, url: str, *, stop_after: int | None = None) -> Lister:
    """A one-thread lister of the folder at ``url``, stopped once ``stop_after`` pages are
    committed (None: run to the end)."""
    stop = threading.Event()

    def on_page(report: CatalogReport) -> None:
        if stop_after is not None and report.pages >= stop_after:
            stop.set()

    return Lister(store, SerialSource(FileRemote(url=url), page=PAGE), seed=1, threads=1, stop=stop,
                  on_page=on_page)


def _catalog(store: Store) -> set[str]:
    return {str(c.key) for _, c in store.candidates(after_rank=None, limit=10**9)}


def _interrupted(tmp_path: Path, names: list[str], pages: int) -> tuple[Store, str]:
    """A folder of ``names`` and a cache whose first listing of it stopped after ``pages`` pages."""
    data = tmp_path / "data"
    for name in names:
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).write_bytes(b"x" * 8)
    store = Store(tmp_path / "cache", create=True)
    report = _lister(store, f"file://{data}", stop_after=pages).run()
    assert not report.complete
    state = store.listings().state()
    assert state.parts and not state.parts[0].done, "the listing is left to resume"
    return store, f"file://{data}"


def test_files_deleted_before_the_resume_point_drop_no_existing_file(tmp_path: Path) -> None:
    names = [f"f{i:05d}.bin" for i in range(2000)]
    store, url = _interrupted(tmp_path, names, pages=10)  # f00000-f00999 committed
    try:
        for name in names[:100]:
            (tmp_path / "data" / name).unlink()
        report = _lister(store, url).run()
        assert report.complete
        on_disk = set(names[100:])
        listed = _catalog(store)
        missing = sorted(on_disk - listed)
        assert not missing, f"{len(missing)} existing file(s) dropped as gone, first {missing[:3]}"
        assert listed - on_disk <= set(names[:100]), "only keys deleted after they were listed stay"
    finally:
        store.close()


def test_the_walk_resumes_in_its_own_order_past_a_folder(tmp_path: Path) -> None:
    """A ``file://`` walk lists folder ``d/`` where its name sorts, before ``d-1.bin`` and
    ``d.txt``, which sort before ``d/`` by bytes: resumed after ``d/0099``, they are still
    listed (a byte-order skip would pass over them)."""
    names = [f"d/{i:04d}" for i in range(PAGE * 2)] + ["d-1.bin", "d.txt", "e.bin"]
    store, url = _interrupted(tmp_path, names, pages=2)  # the walk's first 200 keys: d/0000-d/0199
    try:
        assert store.listings().state().parts[0].after.endswith("d/0199")
        report = _lister(store, url).run()
        assert report.complete
        assert _catalog(store) == set(names)
    finally:
        store.close()


def test_a_key_that_is_not_utf8_is_a_resume_point(tmp_path: Path) -> None:
    """A page ending at a file whose name is not UTF-8 (listed as a bytes key) resumes after it."""
    data = tmp_path / "data"
    data.mkdir()
    names = [b"a%03d" % i for i in range(3)] + [b"b\xff", b"c"]
    for name in names:
        (data / name.decode("utf-8", "surrogateescape")).write_bytes(b"x")
    source = SerialSource(FileRemote(url=f"file://{data}"), page=4)
    first = next(source.pages(source.spans()[0], ""))
    assert [o.key for o in first.objects][-1] == b"b\xff"
    rest = [o.key for p in source.pages(source.spans()[0], first.after) for o in p.objects]
    assert rest == ["c"]


def test_a_count_written_by_an_earlier_version_is_read_from_the_start(tmp_path: Path) -> None:
    """A bare count means other keys once files came and went: the walk is read from its start."""
    data = tmp_path / "data"
    data.mkdir()
    for i in range(5):
        (data / f"k{i}").write_bytes(b"x")
    source = SerialSource(FileRemote(url=f"file://{data}"), page=10)
    keys = [o.key for p in source.pages(source.spans()[0], "3") for o in p.objects]
    assert keys == [f"k{i}" for i in range(5)]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A real ``http.server`` serving a folder: (the folder, its URL)."""
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(_Quiet, directory=str(root))
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield root, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@contextlib.contextmanager
def _http_lister(store: Store, url: str, *, stop_after: int | None = None) -> Iterator[Lister]:
    """A one-thread lister of the key list at ``url`` (as :func:`_lister`), its remote closed after."""
    stop = threading.Event()

    def on_page(report: CatalogReport) -> None:
        if stop_after is not None and report.pages >= stop_after:
            stop.set()

    remote = open_remote(url)
    try:
        yield Lister(store, SerialSource(remote, page=PAGE), seed=1, threads=1, stop=stop, on_page=on_page)
    finally:
        remote.close()


def _key_list(root: Path, keys: list[str]) -> None:
    (root / "index.txt").write_text("".join(f"{k}\t8\n" for k in keys))


def test_a_key_list_in_no_order_rewritten_under_a_listing_is_listed_afresh(
        served: tuple[Path, str], tmp_path: Path) -> None:
    """An ``http(s)://`` key list promises no order: its resume point is the keys consumed with
    their digest. Written again in another order, its first keys are not those committed: the run
    fails and the next lists it afresh, every key cataloged (by count, the first 100 of the new
    order were skipped: 100 keys dropped as gone, the listing complete)."""
    root, url = served
    keys = [f"k{i:04d}" for i in range(3 * PAGE)]
    _key_list(root, keys)
    store = Store(tmp_path / "cache", create=True)
    try:
        with _http_lister(store, url, stop_after=1) as first:
            assert not first.run().complete
        _key_list(root, keys[::-1])
        runs: list[object] = []
        with _http_lister(store, url) as lister:
            for _ in range(3):  # as the listing thread tries a failed run again
                try:
                    runs.append(lister.run().complete)
                    break
                except RemoteError as e:
                    runs.append(str(e))
        assert runs[-1] is True, runs
        missing = sorted(set(keys) - _catalog(store))
        assert not missing, f"{len(missing)} key(s) dropped, first {missing[:3]}; runs: {runs}"
        assert "changed since this listing began" in str(runs[0]), runs
    finally:
        store.close()


def test_a_key_list_that_grew_resumes(served: tuple[Path, str], tmp_path: Path) -> None:
    """Keys added at the end of the list leave the committed ones as they were: resumed."""
    root, url = served
    keys = [f"k{i:04d}" for i in range(3 * PAGE)]
    _key_list(root, keys[:2 * PAGE])
    store = Store(tmp_path / "cache", create=True)
    try:
        with _http_lister(store, url, stop_after=1) as first:
            assert not first.run().complete
        _key_list(root, keys)
        with _http_lister(store, url) as lister:
            report = lister.run()
        assert report.complete and report.listed == 2 * PAGE, "resumed after the first page"
        assert _catalog(store) == set(keys)
    finally:
        store.close()
