"""An ``http(s)://`` index line whose size is not a number (a typo in a hand-written
``index.txt``) is passed over, named by the index's URL and its line number, and counted: it must
not end every listing with a bare ValueError, which the listing beside the sampler would try again
for ever, reading the whole index each time, the listing never complete."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from epochfs.sidecar.listing.lister import Lister
from epochfs.sidecar.listing.sinks import IndexSink
from epochfs.sidecar.listing.sources import SerialSource
from epochfs.sidecar.remote import open_remote

INDEX = b"# keys and sizes\na.bin\t1\nb.bin\t1O\nc.bin\t2\td1\nd.bin\t-3\ne.bin\t3"
"""Line 3 and line 5 are bad (a letter O for a zero; a negative size); the last line has no
newline."""


def test_a_bad_size_is_passed_over_named_and_counted(
    served: tuple[Path, str], caplog: pytest.LogCaptureFixture
) -> None:
    root, base = served
    (root / "data").mkdir()
    (root / "data" / "index.txt").write_bytes(INDEX)
    index_url = f"{base}/data/index.txt"
    remote = open_remote(f"{base}/data/", index_url=index_url)

    with caplog.at_level(logging.WARNING, logger="epochfs.remote"):
        listed = [(o.key, o.size, o.version) for o in remote.list()]

    assert listed == [("a.bin", 1, ""), ("c.bin", 2, "d1"), ("e.bin", 3, "")]
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines  # the first bad line as it is met, the count at the end
    assert lines[0].startswith(f"{index_url} line 3: size '1O' is not a number of bytes"), lines
    assert lines[1] == (
        f"{index_url}: listed without 2 line(s) whose size is not a number of bytes (first: line 3)"
    ), lines


def test_the_listing_of_an_index_with_a_bad_line_completes(served: tuple[Path, str], tmp_path: Path) -> None:
    root, base = served
    (root / "data").mkdir()
    (root / "data" / "index.txt").write_bytes(INDEX)
    remote = open_remote(f"{base}/data/", index_url=f"{base}/data/index.txt")

    report = Lister(IndexSink(str(tmp_path)), SerialSource(remote), seed=1, threads=1).run()

    assert report.complete
    assert report.listed == 3
