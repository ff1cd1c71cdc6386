"""How a paged remote's key space is cut into spans, and what the spans cost in LIST requests.

In-memory paged remote (sidecar/remote/testing.py, pages of 10 keys): S3 ends a listing's last page
where the keys under its prefix end, but a span that is a range of the key space (a start and a
stop) cannot know that the next key is past its stop, so it asks one more page whenever its keys
fill whole pages (the scale benchmark's 1M keys in 100 folders: 1,101 pages for 1,001).
"""

from __future__ import annotations

from epochfs.sidecar.listing.paged import PagedSource
from epochfs.sidecar.listing.span import Span
from epochfs.sidecar.remote.testing import PagedMemoryRemote


def _list_all(remote: PagedMemoryRemote, source: PagedSource) -> tuple[list[Span], list[str], int]:
    spans = source.spans()
    found = remote.list_calls
    keys = [str(o.key) for span in spans for page in source.pages(span, "") for o in page.objects]
    return spans, keys, remote.list_calls - found


def test_folders_alone_are_spans_under_their_prefix_with_no_page_past_their_end() -> None:
    objects = {f"class-{c}/{i:03d}.bin": b"x" for c in range(3) for i in range(20)}  # whole pages
    remote = PagedMemoryRemote(objects, page=10)
    spans, keys, pages = _list_all(remote, PagedSource(remote))
    assert spans == [Span(f"class-{c}/", "", None) for c in range(3)]
    assert sorted(keys) == sorted(objects)
    assert pages == 3 * 2  # two pages a folder; with ranges, 8: the first two asked a third page


def test_files_beside_the_folders_keep_ranges_that_cover_every_key() -> None:
    objects = {f"class-{c}/{i:03d}.bin": b"x" for c in range(3) for i in range(20)}
    objects["class-1.txt"] = b"beside"  # sorts between the folders: only a range holds it
    remote = PagedMemoryRemote(objects, page=10)
    spans, keys, _ = _list_all(remote, PagedSource(remote))
    assert [s.start for s in spans] == ["", "class-1/", "class-2/"] and all(s.prefix == "" for s in spans)
    assert sorted(keys) == sorted(objects)


def test_more_folders_than_spans_are_grouped_in_ranges() -> None:
    objects = {f"c{c:02d}/{i}.bin": b"x" for c in range(6) for i in range(3)}
    remote = PagedMemoryRemote(objects, page=10)
    spans, keys, _ = _list_all(remote, PagedSource(remote, max_spans=4))
    assert [s.start for s in spans] == ["", "c02/", "c04/"]
    assert sorted(keys) == sorted(objects)


def test_a_single_top_folder_is_descended_through() -> None:
    objects = {f"train/class-{c}/{i}.bin": b"x" for c in range(2) for i in range(15)}
    remote = PagedMemoryRemote(objects, page=10)
    spans, keys, _ = _list_all(remote, PagedSource(remote))
    assert spans == [Span("train/class-0/", "", None), Span("train/class-1/", "", None)]
    assert sorted(keys) == sorted(objects)


def test_folders_of_folders_are_looked_into_so_each_class_is_a_span() -> None:
    """``arrays/`` beside ``train/`` (class folders inside): one span over ``train/`` read its
    classes in whatever order its splits fell; each class is a span of its own instead."""
    objects = {f"arrays/{i:03d}.npy": b"x" for i in range(15)}
    objects |= {f"train/class-{c}/{i:03d}.png": b"x" for c in range(3) for i in range(12)}
    remote = PagedMemoryRemote(objects, page=10)
    spans, keys, _ = _list_all(remote, PagedSource(remote))
    assert spans == [Span("arrays/", "", None), *(Span(f"train/class-{c}/", "", None) for c in range(3))]
    assert sorted(keys) == sorted(objects)


def test_nested_folders_are_looked_into_level_by_level() -> None:
    objects = {f"class-{c}/video-{v}/{i:02d}.bin": b"x"
               for c in range(3) for v in range(2) for i in range(11)}
    remote = PagedMemoryRemote(objects, page=10)
    spans, keys, _ = _list_all(remote, PagedSource(remote))
    assert spans == [Span(f"class-{c}/video-{v}/", "", None) for c in range(3) for v in range(2)]
    assert sorted(keys) == sorted(objects)


def test_a_folder_with_files_beside_its_folders_stays_one_span() -> None:
    objects = {f"a/sub-{s}/{i}.bin": b"x" for s in range(2) for i in range(12)}
    objects["a/readme.txt"] = b"beside"
    objects |= {f"b/{i:02d}.bin": b"x" for i in range(12)}
    remote = PagedMemoryRemote(objects, page=10)
    spans, keys, _ = _list_all(remote, PagedSource(remote))
    assert spans == [Span("a/", "", None), Span("b/", "", None)]
    assert sorted(keys) == sorted(objects)


def test_many_folders_are_not_looked_into() -> None:
    """At EXPAND_UNDER folders or more, each is a span as found: no LIST request a folder."""
    from epochfs.sidecar.listing.paged import EXPAND_UNDER

    objects = {f"c{c:03d}/v{v}/{i}.bin": b"x"
               for c in range(EXPAND_UNDER) for v in range(2) for i in range(2)}
    remote = PagedMemoryRemote(objects, page=100)
    spans = PagedSource(remote).spans()
    assert spans == [Span(f"c{c:03d}/", "", None) for c in range(EXPAND_UNDER)]
    assert remote.list_calls <= 2  # the probe of the root, the folders under it
